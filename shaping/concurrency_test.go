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
