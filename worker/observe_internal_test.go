package worker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/store"
)

// gaugesFake is the broker, the store and the lanes of the gauges: a
// depth, queue figures whose read takes took on clock, a quota rate.
type gaugesFake struct {
	clock    *clockwork.FakeClock
	depth    int64
	stats    store.QueueStats
	took     time.Duration
	reads    int
	rate     float64
	observed atomic.Int64
}

func (f *gaugesFake) Depth(context.Context) (int64, error) { return f.depth, nil }

func (f *gaugesFake) QueueStats(_ context.Context, since time.Time, limit int64) (store.QueueStats, error) {
	if !since.Equal(f.clock.Now().Add(-drainWindow)) || limit != 0 {
		return store.QueueStats{}, errors.New("want the last drainWindow, every job")
	}
	f.reads++
	f.clock.Advance(f.took)
	return f.stats, nil
}

func (f *gaugesFake) observeLanes(context.Context) { f.observed.Add(1) }
func (f *gaugesFake) quotaRate() float64           { return f.rate }

func newTestGauges(t *testing.T, f *gaugesFake, window *windowCount) (*gauges, prometheus.Gauge) {
	t.Helper()
	depth := prometheus.NewGauge(prometheus.GaugeOpts{Name: "depth"})
	g, err := newGauges(gaugesConfig{Broker: f, Store: f, Lanes: f, QueueDepth: depth, Window: window, Clock: f.clock})
	require.NoError(t, err)
	return g, depth
}

// TestGaugesMeasure: the depth gauge is the broker's depth plus the jobs
// queued in Postgres, which set the ingest window's count; the drain
// estimate is the jobs waiting over the rate finished in the last
// drainWindow, or the quotas' rate before any finished, or DrainUnknown;
// a count that took d is reused for statsCost × d.
func TestGaugesMeasure(t *testing.T) {
	t.Parallel()
	f := &gaugesFake{clock: clockwork.NewFakeClock(), depth: 10, took: 200 * time.Millisecond,
		stats: store.QueueStats{Queued: 5, InFlight: 5, Finished: 60}}
	var window windowCount
	g, depth := newTestGauges(t, f, &window)
	g.measure(context.Background())
	require.Equal(t, 15.0, gaugeValue(t, depth))
	require.Equal(t, int64(5), window.value())
	require.Equal(t, 20*time.Second, g.Drain()) // 20 jobs at 1 a second

	f.stats = store.QueueStats{Queued: 10}
	f.rate = 2
	f.clock.Advance(statsCost*f.took - f.took - time.Millisecond)
	g.measure(context.Background())
	require.Equal(t, 1, f.reads, "the slow count is reused")
	f.clock.Advance(time.Millisecond)
	g.measure(context.Background())
	require.Equal(t, 2, f.reads)
	require.Equal(t, 10*time.Second, g.Drain()) // 20 jobs at the quotas' 2 a second
	f.rate = 0
	g.measure(context.Background())
	require.Equal(t, DrainUnknown, g.Drain())

	_, err := newGauges(gaugesConfig{Broker: f})
	require.ErrorContains(t, err, "required")
}

// TestGaugesRun: the lanes' gauges every second; the queue measured at
// once and every measureEvery seconds.
func TestGaugesRun(t *testing.T) {
	t.Parallel()
	f := &gaugesFake{clock: clockwork.NewFakeClock()}
	g, _ := newTestGauges(t, f, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { g.Run(ctx); close(done) }()
	for i := 1; i <= measureEvery+1; i++ {
		require.NoError(t, f.clock.BlockUntilContext(ctx, 1))
		f.clock.Advance(time.Second)
		require.Eventually(t, func() bool { return f.observed.Load() == int64(i) }, 10*time.Second, time.Millisecond)
	}
	require.NoError(t, f.clock.BlockUntilContext(ctx, 1))
	cancel()
	<-done
	require.Equal(t, 2, f.reads)
}
