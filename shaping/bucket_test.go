package shaping

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

func TestBucketDebtFIFO(t *testing.T) {
	t.Parallel()
	// 60 per minute = 1/s, capacity 2, full start.
	b, err := NewBucket(BucketConfig{Name: "rpm", Limit: 60, Capacity: 2}, t0)
	require.NoError(t, err)
	want := []float64{0, 0, 1, 2, 3}
	for i, w := range want {
		c, err := b.ReserveAt(t0, 1)
		require.NoError(t, err)
		require.Equal(t, sec(w), c.ReadyAt, "reservation %d", i)
	}
	require.InDelta(t, -3, b.LevelAt(t0), 1e-9)
	_, err = b.ReserveAt(t0, 3)
	require.ErrorIs(t, err, ErrTooLarge)
}

func TestBucketWarmUpCumulative(t *testing.T) {
	t.Parallel()
	// R = 1/s, T = 10 s: cumulative(t) = t²/20 during warm-up, 5 + (t-10) after.
	b, err := NewBucket(BucketConfig{Limit: 60, WarmUp: 10 * time.Second}, t0)
	require.NoError(t, err)
	require.Zero(t, b.LevelAt(t0))
	require.InDelta(t, 1.25, b.LevelAt(sec(5)), 1e-9)
	require.InDelta(t, 5, b.LevelAt(sec(10)), 1e-9)
	require.InDelta(t, 7, b.LevelAt(sec(12)), 1e-9)
	// A new bucket: 5 tokens are ready exactly when cumulative reaches 5.
	b2, err := NewBucket(BucketConfig{Limit: 60, WarmUp: 10 * time.Second}, t0)
	require.NoError(t, err)
	c, err := b2.ReserveAt(t0, 5)
	require.NoError(t, err)
	require.Equal(t, sec(10), c.ReadyAt)
	c, err = b2.ReserveAt(t0, 2)
	require.NoError(t, err)
	require.Equal(t, sec(12), c.ReadyAt)
}

func TestBucketCancelSettleAndChanges(t *testing.T) {
	t.Parallel()
	b, err := NewBucket(BucketConfig{Limit: 60, Capacity: 10, Start: StartEmpty}, t0)
	require.NoError(t, err)
	a, _ := b.ReserveAt(t0, 4) // ready at 4 s
	c, _ := b.ReserveAt(t0, 4) // ready at 8 s
	require.Equal(t, sec(8), c.ReadyAt)
	b.CancelAt(t0, c) // the last one: everything comes back
	require.InDelta(t, -4, b.LevelAt(t0), 1e-9)
	c, _ = b.ReserveAt(t0, 4)
	b.CancelAt(t0, a) // c depends on a's tokens: nothing comes back
	require.InDelta(t, -8, b.LevelAt(t0), 1e-9)
	// Settlement may drive the level further negative.
	b.SettleAt(t0, c, 10)
	require.InDelta(t, -14, b.LevelAt(t0), 1e-9)
	// Doubling the rate halves the time to recover.
	require.NoError(t, b.SetLimitAt(t0, 120))
	require.InDelta(t, 0, b.LevelAt(sec(7)), 1e-9)
	require.NoError(t, b.SetCapacityAt(sec(7), 5))
	require.InDelta(t, 5, b.LevelAt(sec(100)), 1e-9)
}

func TestBucketWaitDeadline(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(t0)
	b, err := NewBucket(BucketConfig{Limit: 60, Start: StartEmpty}, t0)
	require.NoError(t, err)
	ctx, cancel := context.WithDeadline(context.Background(), sec(2))
	defer cancel()
	err = b.Wait(ctx, clock, 5)
	var we *WaitError
	require.ErrorAs(t, err, &we)
	require.Equal(t, 5*time.Second, we.RetryAfter())
	require.InDelta(t, 0, b.LevelAt(t0), 1e-9, "a refused wait reserves nothing")
}

func TestBucketRetimeQueued(t *testing.T) {
	t.Parallel()
	b, err := NewBucket(BucketConfig{Limit: 60, Capacity: 10, Start: StartEmpty}, t0)
	require.NoError(t, err)
	c, _ := b.ReserveAt(t0, 4) // ready at 4 s
	require.Equal(t, sec(4), b.ReadyAt(c))
	// The server says 2 tokens fewer: the queued reservation waits 2 s more.
	b.LowerAt(sec(1), -5)
	require.Equal(t, sec(6), b.ReadyAt(c))
	// Halving the rate stretches what is left of the wait.
	require.NoError(t, b.SetLimitAt(sec(2), 30))
	require.Equal(t, sec(10), b.ReadyAt(c))
	// A reservation made after the corrections is computed afresh.
	c2, _ := b.ReserveAt(sec(2), 1)
	require.Equal(t, sec(12), c2.ReadyAt)
	require.Equal(t, c2.ReadyAt, b.ReadyAt(c2))
}
