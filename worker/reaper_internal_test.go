package worker

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/store"
)

// reapFake answers the sweeps with its keys or errors and counts them.
type reapFake struct {
	reaped, overdue []store.Key
	err             error
	swept           chan string
}

func (f *reapFake) ReapExpired(context.Context) ([]store.Key, error) {
	f.swept <- "reap"
	return f.reaped, f.err
}

func (f *reapFake) ExpireOverdue(context.Context) ([]store.Key, error) {
	f.swept <- "expire"
	return f.overdue, f.err
}

func newTestReaper(t *testing.T, st *reapFake, clock clockwork.Clock, handedBack func()) (*reaper, prometheus.Counter, prometheus.Counter) {
	t.Helper()
	reaped := prometheus.NewCounter(prometheus.CounterOpts{Name: "reaped"})
	expired := prometheus.NewCounter(prometheus.CounterOpts{Name: "expired"})
	r, err := newReaper(reaperConfig{Store: st, Interval: 5 * time.Second, Reaped: reaped, Expired: expired,
		HandedBack: handedBack, Clock: clock, Log: slog.New(slog.DiscardHandler),
		Then: []sweeper{sweepFunc(func(context.Context) { st.swept <- "then" })}})
	require.NoError(t, err)
	return r, reaped, expired
}

// TestReaperSweep: every Interval the reaper hands back the expired leases
// (counted; the worker told), expires the overdue jobs (counted), then
// runs its further sweeps, in that order; errors count nothing.
func TestReaperSweep(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	keys := []store.Key{{Tenant: "t", ID: "a"}, {Tenant: "t", ID: "b"}}
	st := &reapFake{reaped: keys, overdue: keys[:1], swept: make(chan string, 3)}
	told := 0
	r, reaped, expired := newTestReaper(t, st, clock, func() { told++ })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	clock.Advance(5 * time.Second)
	for _, want := range []string{"reap", "expire", "then"} {
		require.Equal(t, want, <-st.swept)
	}
	cancel()
	<-done
	require.Equal(t, 2.0, counterValue(t, reaped))
	require.Equal(t, 1.0, counterValue(t, expired))
	require.Equal(t, 1, told)

	st.err = errors.New("database down")
	r.sweep(context.Background())
	require.Len(t, st.swept, 3)
	require.Equal(t, 2.0, counterValue(t, reaped))
	require.Equal(t, 1.0, counterValue(t, expired))
	require.Equal(t, 1, told)
}

func TestReaperConfig(t *testing.T) {
	t.Parallel()
	r, err := newReaper(reaperConfig{Store: &reapFake{}})
	require.NoError(t, err)
	require.Equal(t, ReapIntervalDefault, r.cfg.Interval)
	_, err = newReaper(reaperConfig{})
	require.ErrorContains(t, err, "Store is required")
}

// counterValue reads c.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}

// sweepFunc is a sweeper made of a function.
type sweepFunc func(ctx context.Context)

func (f sweepFunc) sweep(ctx context.Context) { f(ctx) }
