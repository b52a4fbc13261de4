package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
)

// fairBundle is a store whose tenants a (weight 3) and b (weight 1) share
// model m.
type fairBundle struct {
	*testBundle
	n int
}

func setupFair(t *testing.T, tenants llmq.Tenants) *fairBundle {
	t.Helper()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	ctx := context.Background()
	s, err := store.Open(ctx, storetest.NewDB(t), store.WithClock(clock), store.WithOrder(store.Order{Tenants: tenants}))
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return &fairBundle{testBundle: &testBundle{ctx: ctx, store: s, clock: clock}}
}

// add ingests n jobs of tenant estimated at 8 + 16 tokens, of priority p.
func (b *fairBundle) add(t *testing.T, tenant string, n int, p llmq.Priority) {
	t.Helper()
	b.addTo(t, tenant, "", n, p)
}

// addTo is add for the jobs of a project of the tenant ("": none).
func (b *fairBundle) addTo(t *testing.T, tenant, project string, n int, p llmq.Priority) {
	t.Helper()
	jobs := make([]store.NewJob, n)
	for i := range jobs {
		b.n++
		j, err := llmq.Decode([]byte(fmt.Sprintf(`{"id":"j%05d","tenant":%q,"project":%q,"priority":%q,
			"body":{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":16}}`, b.n, tenant, project, p)), llmq.DecodeOptions{})
		require.NoError(t, err)
		jobs[i] = store.NewJob{Job: j, EstPromptTokens: 8, EstOutputTokens: 16}
	}
	_, err := b.store.Queue().Ingest(b.ctx, jobs)
	require.NoError(t, err)
}

// claim claims rounds x 8 jobs of m and counts them by tenant.
func (b *fairBundle) claim(t *testing.T, rounds int) map[string]int {
	t.Helper()
	return b.claimN(t, rounds, 8)
}

// claimN claims rounds x limit jobs of m and counts them by tenant.
func (b *fairBundle) claimN(t *testing.T, rounds, limit int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range rounds {
		recs, err := b.store.Queue().Claim(b.ctx, store.ClaimRequest{Model: "m", Owner: "w", Lease: time.Minute, Limit: limit})
		require.NoError(t, err)
		for _, r := range recs {
			got[r.Tenant]++
		}
		b.clock.Advance(time.Millisecond)
	}
	return got
}

var threeToOne = llmq.Tenants{"a": {Scope: llmq.Scope{Weight: 3}}, "b": {}}

// TestFairShareByWeight: two backlogged tenants of weights 3 and 1 get the
// claimed tokens 3:1, exactly for jobs of one size, whatever the order in
// which they were recorded; a tenant alone takes every claim.
func TestFairShareByWeight(t *testing.T) {
	t.Parallel()
	b := setupFair(t, threeToOne)
	b.add(t, "b", 400, llmq.PriorityHigh) // first, and of higher priority: no head start
	b.add(t, "a", 400, llmq.PriorityNormal)
	require.Equal(t, map[string]int{"a": 300, "b": 100}, b.claim(t, 50))

	// Work-conserving: a has 100 left, b 300; once a is done b takes all.
	require.Equal(t, map[string]int{"a": 100, "b": 300}, b.claim(t, 50))
	require.Empty(t, b.claim(t, 1))
}

// TestFairShareNoBankedCredit: a tenant that was idle while another took
// the whole quota comes back at the model's virtual clock, with its weight
// share from then on, not with the turns it missed.
func TestFairShareNoBankedCredit(t *testing.T) {
	t.Parallel()
	b := setupFair(t, threeToOne)
	b.add(t, "a", 1000, llmq.PriorityNormal)
	b.add(t, "b", 8, llmq.PriorityNormal)
	require.Equal(t, map[string]int{"a": 24, "b": 8}, b.claim(t, 4))
	require.Equal(t, map[string]int{"a": 400}, b.claim(t, 50), "b is idle: a takes everything")
	b.add(t, "b", 400, llmq.PriorityNormal)
	got := b.claimN(t, 1, 80)
	// b starts at the clock, the smallest tag of a's last claim, 64 virtual
	// tokens before a's next tag (a's 8 jobs of 8 each): 3 jobs of b (24
	// each) fit before it, then 3:1. With the credit it banked, b would
	// take all 80.
	require.Equal(t, map[string]int{"a": 58, "b": 22}, got)
}

// TestFairShareKeepsOrderInsideTenant: each tenant's jobs go in its claim
// order (priority with aging), and a job whose deadline is near goes
// first whatever its tenant's turn.
func TestFairShareKeepsOrderInsideTenant(t *testing.T) {
	t.Parallel()
	b := setupFair(t, threeToOne)
	b.add(t, "a", 20, llmq.PriorityLow)
	b.add(t, "a", 2, llmq.PriorityHigh)
	b.add(t, "b", 20, llmq.PriorityNormal)
	due := b.clock.Now().Add(30 * time.Second)
	j, err := llmq.Decode([]byte(`{"id":"due","tenant":"b","priority":"low","body":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`), llmq.DecodeOptions{})
	require.NoError(t, err)
	j.Deadline = &due
	_, err = b.store.Jobs().Insert(b.ctx, j)
	require.NoError(t, err)
	var ids []string
	for _, limit := range []int{1, 4} {
		recs, err := b.store.Queue().Claim(b.ctx, store.ClaimRequest{Model: "m", Owner: "w", Lease: time.Minute, Limit: limit})
		require.NoError(t, err)
		for _, r := range recs {
			ids = append(ids, r.Tenant+"/"+r.ID)
		}
	}
	// due first (urgent, tag 0: it was recorded without an estimate, so it
	// counts 1 token); then by tag: a's high jobs before its low ones (0,
	// 8, then 16), b's next at 1.
	require.Equal(t, []string{"b/due", "a/j00021", "b/j00023", "a/j00022", "a/j00001"}, ids)
}

// TestPriorityCapOfTenant: a tenant capped at normal has its high jobs
// ordered as normal ones.
func TestPriorityCapOfTenant(t *testing.T) {
	t.Parallel()
	b := setupFair(t, llmq.Tenants{"a": {Scope: llmq.Scope{Priority: llmq.PriorityNormal},
		Projects: map[string]llmq.Scope{"bulk": {Priority: llmq.PriorityLow}}}})
	b.add(t, "a", 1, llmq.PriorityHigh)
	j, err := llmq.Decode([]byte(`{"id":"bulk","tenant":"a","project":"bulk","priority":"high","body":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`), llmq.DecodeOptions{})
	require.NoError(t, err)
	_, err = b.store.Jobs().Insert(b.ctx, j)
	require.NoError(t, err)
	rec, err := b.store.Jobs().Get(b.ctx, "a", "j00001")
	require.NoError(t, err)
	require.Equal(t, llmq.PriorityHigh, rec.Priority, "the job keeps the priority it asked for")
	require.Equal(t, b.clock.Now().Add(store.AgingStepDefault), rec.SchedKey.UTC(), "ordered as normal")
	rec, err = b.store.Jobs().Get(b.ctx, "a", "bulk")
	require.NoError(t, err)
	require.Equal(t, b.clock.Now().Add(2*store.AgingStepDefault), rec.SchedKey.UTC(), "the project's cap: low")
}
