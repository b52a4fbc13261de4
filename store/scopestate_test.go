package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// TestClaimTenantCaps: a tenant capped at n gives at most n jobs to a
// claim, one capped at 0 none, and its turns go to the others (the claim
// still fills its limit); a held project's jobs stay, its tenant's other
// jobs do not.
func TestClaimTenantCaps(t *testing.T) {
	t.Parallel()
	b := setupFair(t, threeToOne)
	b.add(t, "a", 100, llmq.PriorityNormal)
	b.add(t, "b", 100, llmq.PriorityNormal)
	b.addTo(t, "c", "bulk", 100, llmq.PriorityNormal)
	b.addTo(t, "c", "live", 10, llmq.PriorityNormal)
	claim := func(r store.ClaimRequest) map[string]int {
		r.Model, r.Owner, r.Lease = "m", "w", time.Minute
		recs, err := b.store.Queue().Claim(b.ctx, r)
		require.NoError(t, err)
		got := map[string]int{}
		for _, rec := range recs {
			got[rec.Tenant+"/"+rec.Project]++
		}
		b.clock.Advance(time.Millisecond)
		return got
	}
	require.Equal(t, map[string]int{"a/": 2, "b/": 9, "c/live": 9}, // a capped; b and c by weight
		claim(store.ClaimRequest{Limit: 20, TenantCaps: map[string]int{"a": 2, "b": 10},
			HeldProjects: []store.ScopeRef{{Tenant: "c", Project: "bulk"}}}))
	require.Equal(t, map[string]int{"b/": 20},
		claim(store.ClaimRequest{Limit: 20, TenantCaps: map[string]int{"a": 0, "c": 0}}))
	got := claim(store.ClaimRequest{Limit: 20})
	require.Equal(t, 20, got["a/"]+got["b/"]+got["c/bulk"]+got["c/live"], "no cap: the fair share alone")
}

// TestWaitingReasonTenantQuota: a queued job of a held tenant, or of a
// held project, says tenant_quota until the scope is freed or its state
// is older than ModelStateTTL; the tenant's other projects do not.
func TestWaitingReasonTenantQuota(t *testing.T) {
	t.Parallel()
	b := setupFair(t, nil)
	b.add(t, "a", 1, llmq.PriorityNormal)           // j00001
	b.addTo(t, "c", "bulk", 1, llmq.PriorityNormal) // j00002
	b.addTo(t, "c", "live", 1, llmq.PriorityNormal) // j00003
	reason := func(tenant, id string) string {
		rec, err := b.store.Jobs().Get(b.ctx, tenant, id)
		require.NoError(t, err)
		return rec.WaitingReason
	}
	require.NoError(t, b.store.Queue().SetScopeStates(b.ctx, "w1", []store.ScopeRef{{Tenant: "a"}, {Tenant: "c", Project: "bulk"}}, nil))
	require.Equal(t, store.WaitingReasonTenantQuota, reason("a", "j00001"))
	require.Equal(t, store.WaitingReasonTenantQuota, reason("c", "j00002"))
	require.Equal(t, "", reason("c", "j00003"))
	require.NoError(t, b.store.Queue().SetScopeStates(b.ctx, "w1", nil, []store.ScopeRef{{Tenant: "a"}}))
	require.Equal(t, "", reason("a", "j00001"), "freed")
	b.clock.Advance(store.ModelStateTTL)
	require.Equal(t, "", reason("c", "j00002"), "not rewritten: the scheduler stopped holding")
}
