package worker

import (
	"context"
	"sync/atomic"
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

// TestSchedulerPopReady: an item its own quota holds stays in its place
// and the next item goes; once released it goes first again (its rank);
// PopReady waits for the earliest time an item gave, or for a wake.
func TestSchedulerPopReady(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(time.Unix(1000, 0))
	s := NewScheduler[string](10*time.Second, clock)
	s.Push("a1", 0) // most urgent, but held
	s.Push("b1", 1)
	s.Push("b2", 1)
	heldUntil := clock.Now().Add(2 * time.Second)
	ready := func(v string) (bool, time.Time) {
		if v[0] == 'a' && clock.Now().Before(heldUntil) {
			return false, heldUntil
		}
		return true, time.Time{}
	}
	ctx := context.Background()
	for _, want := range []string{"b1", "b2"} {
		v, err := s.PopReady(ctx, ready, nil)
		require.NoError(t, err)
		require.Equal(t, want, v, "a1 does not hold back the others")
	}
	require.Equal(t, 1, s.Len(), "a1 kept")
	got := make(chan string)
	go func() {
		v, _ := s.PopReady(ctx, ready, nil)
		got <- v
	}()
	require.NoError(t, clock.BlockUntilContext(ctx, 1)) // the timer of a1's time
	clock.Advance(2 * time.Second)
	require.Equal(t, "a1", <-got)

	// Without a time, a wake asks again.
	wake := make(chan struct{})
	var held atomic.Bool
	held.Store(true)
	s.Push("c", 0)
	go func() {
		v, _ := s.PopReady(ctx, func(string) (bool, time.Time) { return !held.Load(), time.Time{} }, func() <-chan struct{} { return wake })
		got <- v
	}()
	select {
	case v := <-got:
		t.Fatalf("popped %q while held", v)
	case <-time.After(50 * time.Millisecond): // a negative check: nothing may arrive
	}
	held.Store(false)
	close(wake)
	require.Equal(t, "c", <-got)
}
