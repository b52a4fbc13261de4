package app_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/app"
	"github.com/llmq/llmq/internal/chaos"
)

// TestDatabaseDownAtStart: a worker and API started while Postgres is
// down retries with backoff, logging why, and starts once it answers, and
// so does the batch lane when Postgres goes away again before Start; a
// one-shot command fails at once.
func TestDatabaseDownAtStart(t *testing.T) {
	if testing.Short() {
		t.Skip("Postgres")
	}
	t.Parallel()
	s := settings(t)
	p, err := chaos.New("127.0.0.1:5432")
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	require.Contains(t, s.DatabaseURL, "127.0.0.1:5432")
	s.DatabaseURL = strings.Replace(s.DatabaseURL, "127.0.0.1:5432", p.Addr(), 1)
	p.Cut() // Postgres is down

	_, err = app.New(context.Background(), app.Config{Settings: s, Producer: true, Logger: quiet})
	require.Error(t, err, "produce does not wait")

	var logs lockedBuffer
	clk := clockwork.NewFakeClock()
	done := make(chan error, 1)
	var a *app.App
	go func() {
		var err error
		a, err = app.New(context.Background(), app.Config{Settings: s, Clock: clk,
			Logger: slog.New(slog.NewTextHandler(&logs, nil)), Worker: &app.WorkerConfig{},
			API: &app.APIConfig{Listen: "127.0.0.1:0"}})
		done <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, wait := range []time.Duration{app.DatabaseRetryMin, 2 * app.DatabaseRetryMin} {
		require.NoError(t, clk.BlockUntilContext(ctx, 1), "a retry waits on the clock")
		require.Contains(t, logs.String(), "database unavailable at start-up; retrying")
		require.Contains(t, logs.String(), "retry_in="+wait.String())
		if wait == 2*app.DatabaseRetryMin {
			p.Restore() // Postgres is back
		}
		clk.Advance(wait)
	}
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatalf("New did not return once the database answered; logs:\n%s", logs.String())
	}
	require.Contains(t, logs.String(), "database reachable")
	require.NotContains(t, logs.String(), "password")

	// Postgres goes away again before the parts start: the batch lane's
	// first read waits for it too.
	p.Cut()
	started := make(chan error, 1)
	go func() { started <- a.Start(ctx) }()
	require.NoError(t, clk.BlockUntilContext(ctx, 1), "the batch lane's retry waits on the clock")
	require.Contains(t, logs.String(), "part=\"batch lane\"")
	p.Restore()
	clk.Advance(app.DatabaseRetryMin)
	select {
	case err := <-started:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatalf("Start did not return once the database answered; logs:\n%s", logs.String())
	}
	require.NoError(t, a.Stop(context.Background()))
}
