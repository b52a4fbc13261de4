package worker

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

func TestSchedulerPriorityAndAging(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(time.Unix(1000, 0))
	s := NewScheduler[string](10*time.Second, clock)
	s.Push("low-old", 2)
	clock.Advance(5 * time.Second)
	s.Push("normal", 1)
	s.Push("high", 0)
	s.Push("normal-2", 1)

	pop := func() string {
		v, ok := s.TryPop()
		require.True(t, ok)
		return v
	}
	// low-old has aged 0.5 levels (rank 1.5): behind high and both normals.
	require.Equal(t, "high", pop())
	require.Equal(t, "normal", pop())
	// After 25 s more, low-old is at 2-3.0 = -1.0 and normal-2 at 1-2.5 = -1.5.
	clock.Advance(25 * time.Second)
	require.Equal(t, "normal-2", pop())
	require.Equal(t, "low-old", pop())
	_, ok := s.TryPop()
	require.False(t, ok)

	// A low job waiting long enough overtakes a fresh high one.
	s.Push("low", 2)
	clock.Advance(21 * time.Second)
	s.Push("high-fresh", 0)
	require.Equal(t, "low", pop())
}

func TestSchedulerPopWaits(t *testing.T) {
	t.Parallel()
	s := NewScheduler[int](0, nil)
	got := make(chan int)
	go func() {
		v, err := s.Pop(context.Background())
		if err == nil {
			got <- v
		}
	}()
	s.Push(7, 1)
	select {
	case v := <-got:
		require.Equal(t, 7, v)
	case <-time.After(5 * time.Second):
		t.Fatal("Pop did not return after Push")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Pop(ctx)
	require.ErrorIs(t, err, context.Canceled)
}
