package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// TestQueueTenants: the tenants holding queued or in-flight jobs are
// listed with their jobs in flight and finished, and CountQueued counts
// each one's queued jobs up to its own limit.
func TestQueueTenants(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tenantJob := func(tenant, id, model string) *llmq.Job {
		j, err := llmq.Decode(fmt.Appendf(nil, `{"id":%q,"tenant":%q,"body":{"model":%q,"messages":[{"role":"user","content":"hi"}]}}`,
			id, tenant, model), llmq.DecodeOptions{})
		require.NoError(t, err)
		return j
	}
	// acme: 2 held, then one of them finished; 3 queued over two models.
	require.Len(t, b.hold(t, "w", newJob(t, "h0"), newJob(t, "h1")), 2)
	_, err := b.store.Queue().StoreResult(b.ctx, acme("h0"), store.Result{})
	require.NoError(t, err)
	for i, m := range []string{"big", "small", "small"} {
		_, err := b.store.Jobs().Insert(b.ctx, tenantJob("acme", fmt.Sprint("q", i), m))
		require.NoError(t, err)
	}
	for i := range 5 {
		_, err := b.store.Jobs().Insert(b.ctx, tenantJob("beta", fmt.Sprint("q", i), "small"))
		require.NoError(t, err)
	}
	_, err = b.store.Jobs().Insert(b.ctx, tenantJob("gone", "x", "small"))
	require.NoError(t, err)
	_, err = b.store.Jobs().Cancel(b.ctx, "gone", "x")
	require.NoError(t, err)

	ts, err := b.store.Queue().QueueTenants(b.ctx, b.clock.Now().Add(-time.Minute))
	require.NoError(t, err)
	require.Equal(t, []store.TenantQueue{{Tenant: "acme", InFlight: 1, Finished: 1}, {Tenant: "beta"}}, ts,
		"gone, whose jobs all finished, is not listed")
	ts, err = b.store.Queue().QueueTenants(b.ctx, time.Time{})
	require.NoError(t, err)
	require.Equal(t, []store.TenantQueue{{Tenant: "acme", InFlight: 1}, {Tenant: "beta"}}, ts, "no window: none counted finished")

	n, err := b.store.Queue().CountQueued(b.ctx, []string{"beta", "acme", "none"}, []int64{4, 10, 10})
	require.NoError(t, err)
	require.Equal(t, []int64{4, 3, 0}, n, "beta counted up to its limit")
}

// TestCountProjects: a tenant's projects' jobs queued or in flight, the
// queued ones counted among the first limit of the tenant's queued jobs.
func TestCountProjects(t *testing.T) {
	t.Parallel()
	b := setup(t)
	insert := func(tenant, id, project string) {
		j, err := llmq.Decode(fmt.Appendf(nil, `{"id":%q,"tenant":%q,"project":%q,"body":{"model":"big","messages":[{"role":"user","content":"hi"}]}}`,
			id, tenant, project), llmq.DecodeOptions{})
		require.NoError(t, err)
		_, err = b.store.Jobs().Insert(b.ctx, j)
		require.NoError(t, err)
		b.clock.Advance(time.Millisecond)
	}
	insert("acme", "r0", "bulk")
	recs, err := b.store.Queue().Claim(b.ctx, store.ClaimRequest{Model: "big", Owner: "w", Lease: time.Minute, Limit: 1})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	for i, p := range []string{"bulk", "bulk", "web", "bulk"} {
		insert("acme", fmt.Sprint("q", i), p)
	}
	insert("beta", "q0", "bulk")
	n, err := b.store.Queue().CountProjects(b.ctx, "acme", []string{"bulk", "web", "none"}, 10)
	require.NoError(t, err)
	require.Equal(t, []int64{4, 1, 0}, n, "bulk: 3 queued and 1 running")
	n, err = b.store.Queue().CountProjects(b.ctx, "acme", []string{"bulk", "web"}, 2)
	require.NoError(t, err)
	require.Equal(t, []int64{3, 0}, n, "among the first 2 queued jobs only")
}
