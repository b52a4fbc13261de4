package worker

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

// listenFake fails each listen, after listening first when listens says
// so, and announces model m.
type listenFake struct {
	listens chan bool
}

func (f *listenFake) ListenJobsQueued(ctx context.Context, listening func(), queued func(model string)) error {
	select {
	case ok := <-f.listens:
		if ok {
			listening()
			queued("m")
		}
		return errors.New("connection lost")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestQueuedListenerReconnects: a connection that keeps failing is tried
// again after 100 ms, 200 ms, … up to 10 s; once it listened, after 100 ms
// again.
// Each listen and each announced model is told.
func TestQueuedListenerReconnects(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	f := &listenFake{listens: make(chan bool)}
	var listened, models []string
	q, err := newQueuedListener(queuedListenerConfig{Listener: f, Clock: clock, Log: slog.New(slog.DiscardHandler),
		Listening: func() { listened = append(listened, "listen") }, Queued: func(m string) { models = append(models, m) }})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	wait := func(d time.Duration) { // the listener waits d before it listens again
		t.Helper()
		require.NoError(t, clock.BlockUntilContext(ctx, 1))
		clock.Advance(d - time.Nanosecond)
		select {
		case f.listens <- false:
			t.Fatalf("listened again before %v", d)
		case <-time.After(10 * time.Millisecond):
		}
		clock.Advance(time.Nanosecond)
	}
	listen := func(ok bool) {
		t.Helper()
		select {
		case f.listens <- ok:
		case <-time.After(10 * time.Second):
			t.Fatal("the listener did not listen again")
		}
	}
	listen(false)
	wait(100 * time.Millisecond)
	listen(false)
	wait(200 * time.Millisecond)
	listen(true)
	wait(100 * time.Millisecond)
	for _, d := range []time.Duration{200, 400, 800, 1600, 3200, 6400, 10000, 10000} { // capped at 10 s
		listen(false)
		wait(d * time.Millisecond)
	}
	listen(false)
	cancel()
	<-done
	require.Equal(t, []string{"listen"}, listened)
	require.Equal(t, []string{"m"}, models)

	_, err = newQueuedListener(queuedListenerConfig{Listener: f})
	require.ErrorContains(t, err, "required")
}
