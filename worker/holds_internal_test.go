package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/tracing"
	"github.com/llmq/llmq/store"
)

// TestHoldLogWaits: a job gets the reason of each hold that lasted past
// its record, since the hold's first round; one tenant_quota for its
// tenant's and its project's.
func TestHoldLogWaits(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	acme, proj := store.ScopeRef{Tenant: "acme"}, store.ScopeRef{Tenant: "acme", Project: "p"}
	var h holdLog
	h.scopesLocked(map[store.ScopeRef]bool{acme: true}, at(1))
	h.scopesLocked(map[store.ScopeRef]bool{acme: true, proj: true}, at(2))
	h.scopesLocked(map[store.ScopeRef]bool{proj: true}, at(3)) // acme's streak ends at 2
	h.setLocked(modelHoldKey("m"), true, at(4))
	h.setLocked(modelHoldKey("m"), false, at(5))
	h.setLocked(modelHoldKey("m"), true, at(6)) // a new streak

	rec := func(project string, created int) *store.JobRecord {
		return &store.JobRecord{Tenant: "acme", Project: project, RequestedModel: "m", CreatedAt: at(created)}
	}
	require.Equal(t, []tracing.Wait{{Reason: store.WaitingReasonTenantQuota, Since: at(1)},
		{Reason: store.WaitingReasonProviderQuota, Since: at(6)}}, h.waits(rec("p", 0)))
	require.Equal(t, []tracing.Wait{{Reason: store.WaitingReasonTenantQuota, Since: at(2)},
		{Reason: store.WaitingReasonProviderQuota, Since: at(6)}}, h.waits(rec("p", 3)), "acme's hold ended before")
	require.Equal(t, []tracing.Wait{{Reason: store.WaitingReasonProviderQuota, Since: at(6)}}, h.waits(rec("", 3)))
	require.Empty(t, h.waits(rec("", 7)))
}
