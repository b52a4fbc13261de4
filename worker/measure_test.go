package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/worker"
)

// slowCount is a job store whose queue count takes a second of the
// worker's clock, as counting 1,000,000 queued jobs takes 0.2-0.8 s.
type slowCount struct {
	worker.JobStore
	clock *clockwork.FakeClock
	calls atomic.Int32
}

func (s *slowCount) QueueStats(ctx context.Context, since time.Time, limit int64) (store.QueueStats, error) {
	s.calls.Add(1)
	s.clock.Advance(time.Second)
	return s.JobStore.QueueStats(ctx, since, limit)
}

// TestMeasureCountsASlowQueueLessOften: the worker reads the queue's
// figures in Postgres every measureEvery seconds, but a count that took d
// is read again only statsCost × d later (50 s after a count of 1 s), its
// figures reused in between; the broker's depth is read every time.
func TestMeasureCountsASlowQueueLessOften(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 3})
	clock := clockwork.NewFakeClock()
	slow := &slowCount{JobStore: tb.store.Queue(), clock: clock}
	cfg := tb.workerConfig(t, func(c *worker.Config) { c.Store, c.Clock = slow, clock })
	t.Cleanup(func() { _ = cfg.Subscriber.Close() }) // the worker is not started, so it does not close it
	w, err := worker.New(cfg)
	require.NoError(t, err)
	ctx := context.Background()
	var counted []int32
	for range 12 { // a minute of measures, every 5 s
		w.Measure(ctx)
		counted = append(counted, slow.calls.Load())
		clock.Advance(5 * time.Second)
	}
	// Measured at 0, 6, 11, ... 56 s: counted at 0 (taking until 1 s),
	// then not before 50 s, at 51 s (the next not before 101 s).
	require.Equal(t, []int32{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2}, counted)
}
