package background_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/background"
	"github.com/llmq/llmq/internal/backoff"
)

// TestRelisten: a session that keeps failing is tried again after 100 ms,
// 200 ms, … up to the policy's 1 s; once a session listened, after 100 ms
// again. Each failure is told with its wait, and Relisten returns when its
// context ends, whether it waits or listens.
func TestRelisten(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	sessions := make(chan bool) // true: the session listens before it fails
	var failures []string
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		n := 0
		background.Relisten(ctx, clock, backoff.Policy{Base: 100 * time.Millisecond, Max: time.Second},
			func(ctx context.Context, listening func()) error {
				select {
				case ok := <-sessions:
					if ok {
						listening()
					}
					n++
					return fmt.Errorf("session %d lost", n)
				case <-ctx.Done():
					return ctx.Err()
				}
			},
			func(err error, wait time.Duration) { failures = append(failures, fmt.Sprint(err, " ", wait)) })
	}()
	session := func(ok bool) {
		t.Helper()
		select {
		case sessions <- ok:
		case <-time.After(10 * time.Second):
			t.Fatal("Relisten did not listen again")
		}
	}
	wait := func(d time.Duration) { // Relisten waits d before it listens again
		t.Helper()
		require.NoError(t, clock.BlockUntilContext(ctx, 1))
		clock.Advance(d - time.Nanosecond)
		select {
		case sessions <- false:
			t.Fatalf("listened again before %v", d)
		case <-time.After(10 * time.Millisecond):
		}
		clock.Advance(time.Nanosecond)
	}
	ms := time.Millisecond
	for _, d := range []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second, time.Second} {
		session(false)
		wait(d)
	}
	session(true)
	wait(100 * ms)
	session(false)
	wait(200 * ms)
	cancel() // while it listens
	<-done
	require.Equal(t, []string{"session 1 lost 100ms", "session 2 lost 200ms", "session 3 lost 400ms", "session 4 lost 800ms",
		"session 5 lost 1s", "session 6 lost 1s", "session 7 lost 100ms", "session 8 lost 200ms"}, failures)

	// Cancelled while it waits.
	ctx, cancel = context.WithCancel(context.Background())
	waiting := make(chan struct{})
	done = make(chan struct{})
	go func() {
		defer close(done)
		background.Relisten(ctx, clock, backoff.Policy{Base: time.Hour, Max: time.Hour},
			func(context.Context, func()) error { return errors.New("refused") },
			func(error, time.Duration) { close(waiting) })
	}()
	<-waiting
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Relisten did not return when its context ended")
	}
}
