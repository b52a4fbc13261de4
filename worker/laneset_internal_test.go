package worker

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/shaping"
)

// upstreamFunc is an Upstream of one function.
type upstreamFunc func(ctx context.Context, model string, body []byte) Reply

func (f upstreamFunc) Call(ctx context.Context, model string, body []byte) Reply {
	return f(ctx, model, body)
}

// openScopes are laneScopes that never hold a ticket.
type openScopes struct{}

func (openScopes) scopeReady(*ticket) (bool, time.Time) { return true, time.Time{} }
func (openScopes) releaseScopes([]*scopeQuota)          {}
func (openScopes) changed() <-chan struct{}             { return nil }

// TestLaneSet: the lanes are made once per model and pool entry, each
// with its model's (or entry's) limits and the strategy they allow, the
// entries' lanes on their own ledger keys; the dispatchers end with the
// work context. A configuration without its required parts is refused.
func TestLaneSet(t *testing.T) {
	t.Parallel()
	_, err := newLaneSet(laneSetConfig{})
	require.ErrorContains(t, err, "Upstream, Scopes, BudgetAllows and Metrics are required")

	up := upstreamFunc(func(context.Context, string, []byte) Reply { return Reply{} })
	cat := llmq.Catalog{Models: map[string]llmq.Model{"quota": {RPM: 600, TPM: 60_000}, "bare": {}}}
	ls, err := newLaneSet(laneSetConfig{Upstream: up, Scopes: openScopes{}, Metrics: newMetrics(prometheus.NewRegistry()),
		BudgetAllows: func(*job, float64) bool { return true }, Catalog: func() llmq.Catalog { return cat },
		Strategy: shaping.StrategyShape, QuotaScope: "sim",
		Pools: map[string][]PoolEntry{"pooled": {{Name: "a", Upstream: up, QuotaScope: "ka", RPM: 60},
			{Name: "b", Upstream: up, QuotaScope: "kb", TPM: 6000}}},
		Clock: clockwork.NewFakeClock()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ls.begin(ctx, ctx)

	q := ls.lane("quota")
	require.Same(t, q, ls.lane("quota"), "one lane per model")
	require.Equal(t, shaping.StrategyShape, q.shaper.Snapshot().Strategy)
	require.Equal(t, shaping.StrategyAdaptive, ls.lane("bare").shaper.Snapshot().Strategy,
		"shape without a quota runs adaptive, which learns it")

	pooled := ls.lanesOf("pooled")
	require.Len(t, pooled, 2)
	require.Equal(t, []string{"pooled@a", "pooled@b"}, []string{pooled[0].shaper.Snapshot().Name, pooled[1].shaper.Snapshot().Name})
	require.Equal(t, []string{"ka pooled", "kb pooled"}, ls.quotaKeys("pooled"))
	require.Equal(t, []string{"sim quota"}, ls.quotaKeys("quota"))
	require.Len(t, ls.all(), 4)

	cancel()
	stopped := make(chan struct{})
	go func() { ls.wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the dispatchers did not end with the work context")
	}
}
