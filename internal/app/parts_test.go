package app

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPartsOrder checks the list's contract: resources open in New, the
// components start first to last, a failed start leaves the rest unstarted,
// and stopping runs last to first over what is open or running only, each
// on a context that the caller's cancellation does not end but the part's
// budget does.
func TestPartsOrder(t *testing.T) {
	t.Parallel()
	var log []string
	var p parts
	deadlines := map[string]bool{}
	stop := func(name string) func(context.Context) error {
		return func(ctx context.Context) error {
			log = append(log, "stop "+name)
			require.NoError(t, ctx.Err(), "a stop runs on a live context")
			_, ok := ctx.Deadline()
			deadlines[name] = ok
			if name == "b" {
				return errors.New("b failed")
			}
			return nil
		}
	}
	start := func(name string, err error) func(context.Context) error {
		return func(context.Context) error { log = append(log, "start "+name); return err }
	}
	p.opened("store", stop("store"))
	p.opened("broker", stop("broker"))
	p.add("a", start("a", nil), stop("a"), time.Second)
	p.add("b", start("b", nil), stop("b"), 0)
	p.add("c", start("c", errors.New("boom")), stop("c"), time.Second)
	p.add("d", start("d", nil), stop("d"), time.Second)

	err := p.startAll(context.Background())
	require.EqualError(t, err, "app: start c: boom")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = p.stopAll(ctx, slog.New(slog.DiscardHandler))
	require.EqualError(t, err, "app: stop b: b failed")
	require.Equal(t, []string{"start a", "start b", "start c",
		"stop b", "stop a", "stop broker", "stop store"}, log)
	require.Equal(t, map[string]bool{"a": true, "b": false, "broker": false, "store": false}, deadlines,
		"a budget where one is set, none where the part bounds itself")

	log = nil
	require.NoError(t, p.stopAll(ctx, slog.New(slog.DiscardHandler)))
	require.Empty(t, log, "a second stop finds nothing running")
}

func TestStopWithin(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), testKey{}, "v"))
	cancel()
	err := StopWithin(ctx, func(ctx context.Context) error {
		require.NoError(t, ctx.Err())
		require.Equal(t, "v", ctx.Value(testKey{}))
		<-ctx.Done()
		return ctx.Err()
	}, 10*time.Millisecond)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

type testKey struct{}
