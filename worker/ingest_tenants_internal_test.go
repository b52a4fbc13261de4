package worker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
)

// TestTenantCountOverShare: a tenant holds more than its share of the
// window when its queued jobs (read, plus recorded, less claimed) pass
// the window times its weight over the weights of the tenants counted, and
// never more than half for a tenant of weight 1 alone.
func TestTenantCountOverShare(t *testing.T) {
	t.Parallel()
	ts := llmq.Tenants{"heavy": {Scope: llmq.Scope{Weight: 3}}}
	for _, tc := range []struct {
		name              string
		queued            map[string]int64
		recorded, claimed map[string]int64
		slack             int
		want              bool
	}{
		{"alone at half", map[string]int64{"a": 5}, nil, nil, 0, false},
		{"alone past half", map[string]int64{"a": 5}, map[string]int64{"a": 1}, nil, 0, true},
		{"claims bring it back", map[string]int64{"a": 5}, map[string]int64{"a": 2}, map[string]int64{"a": 2}, 0, false},
		{"two at half each", map[string]int64{"a": 5, "b": 5}, nil, nil, 0, false},
		{"one of two past half", map[string]int64{"a": 6, "b": 4}, nil, nil, 0, true},
		{"a newcomer recorded since the read", map[string]int64{"a": 6}, map[string]int64{"b": 1}, nil, 0, true},
		{"weight 3 of 4", map[string]int64{"heavy": 7, "b": 2}, nil, nil, 0, false},
		{"weight 3 of 4, past", map[string]int64{"heavy": 8, "b": 2}, nil, nil, 0, true},
		{"one of two past half, within the slack", map[string]int64{"a": 7, "b": 3}, nil, nil, 2, false},
		{"one of two past half and the slack", map[string]int64{"a": 8, "b": 2}, nil, nil, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c tenantCount
			c.set(tc.queued, map[string]int64{}, weightOf(ts, tc.queued))
			for tenant, n := range tc.recorded {
				c.add(tenant, n, false)
			}
			for tenant, n := range tc.claimed {
				c.add(tenant, n, true)
			}
			require.Equal(t, tc.want, c.overShare(10, tc.slack, ts))
		})
	}
}

func weightOf(ts llmq.Tenants, counts map[string]int64) float64 {
	w := 0.0
	for t := range counts {
		w += ts.Weight(t)
	}
	return w
}

// TestTenantCap: a batch lets a tenant's jobs in up to its cap, counting
// what it holds (queued and in flight at the read, recorded since) and the
// batch's own jobs before it; -1 lets every job in.
func TestTenantCap(t *testing.T) {
	t.Parallel()
	in := &ingester{cfg: ingesterConfig{TenantCap: 4}}
	in.tenants.set(map[string]int64{"a": 1}, map[string]int64{"a": 1}, 1)
	in.tenants.add("a", 1, false)
	in.tenants.add("a", 1, true)
	a := tenantAdmission{in: in}
	job := func(tenant string) *llmq.Job { return &llmq.Job{Tenant: tenant} }
	require.True(t, a.admit(job("a")), "holds 3 of 4")
	require.False(t, a.admit(job("a")), "the batch's first job brought it to its cap")
	require.True(t, a.admit(job("b")))
	require.Equal(t, `tenant "a" holds 3 jobs queued or in flight, its cap (ingest.tenant_cap 4)`, in.tenantFull(job("a")).LastError)
	in.cfg.TenantCap = -1
	require.True(t, a.admit(job("a")))
}
