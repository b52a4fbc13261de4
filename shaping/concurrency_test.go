package shaping

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConcurrencyLimiterFIFOAndResize(t *testing.T) {
	t.Parallel()
	c := NewConcurrencyLimiter(1)
	require.True(t, c.TryAcquire())
	require.False(t, c.TryAcquire())
	got := make(chan int, 2)
	for i := range 2 {
		go func() {
			if c.Acquire(context.Background()) == nil {
				got <- i
			}
		}()
		require.Eventually(t, func() bool { return c.Waiting() == i+1 }, time.Second, time.Millisecond)
	}
	c.Release()
	require.Equal(t, 0, <-got, "first come, first served")
	c.SetLimit(2)
	require.Equal(t, 1, <-got, "a raised limit admits the next waiter")
	require.Equal(t, 2, c.InFlight())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, c.Acquire(ctx), context.Canceled)
}

// TestConcurrencyLimiterCounts: the counts after every way out of the queue,
// and a Release with nothing in flight.
func TestConcurrencyLimiterCounts(t *testing.T) {
	t.Parallel()
	c := NewConcurrencyLimiter(0)
	require.Equal(t, 1, c.Limit(), "at least 1")
	c.Release()
	require.Equal(t, 0, c.InFlight(), "a Release with nothing in flight")
	require.NoError(t, c.Acquire(context.Background()))
	require.Equal(t, 1, c.InFlight())

	// A waiter whose context ends leaves the queue.
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() { gone <- c.Acquire(ctx) }()
	require.Eventually(t, func() bool { return c.Waiting() == 1 }, 5*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-gone, context.Canceled)
	require.Equal(t, 0, c.Waiting())
	require.False(t, c.TryAcquire())

	// A granted waiter is no longer waiting; the gone one is skipped.
	got := make(chan error, 1)
	go func() { got <- c.Acquire(context.Background()) }()
	require.Eventually(t, func() bool { return c.Waiting() == 1 }, 5*time.Second, time.Millisecond)
	c.Release()
	require.NoError(t, <-got)
	require.Equal(t, 0, c.Waiting())
	require.Equal(t, 1, c.InFlight())

	// A lower limit delays new slots without revoking held ones.
	c.SetLimit(3)
	require.True(t, c.TryAcquire())
	require.True(t, c.TryAcquire())
	c.SetLimit(1)
	require.Equal(t, 3, c.InFlight())
	require.False(t, c.TryAcquire())
	c.Release()
	c.Release()
	require.False(t, c.TryAcquire(), "1 in flight, limit 1")
	c.Release()
	require.True(t, c.TryAcquire())
}
