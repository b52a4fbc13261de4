package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/llmq/llmq/internal/backoff"
	"github.com/llmq/llmq/internal/redact"
	"github.com/llmq/llmq/store"
)

// DatabaseRetryMin and DatabaseRetryMax bound the wait between two
// attempts to open the database when a worker or the API starts while
// Postgres is down (or restarting): it doubles from the first to the
// second.
const (
	DatabaseRetryMin = time.Second
	DatabaseRetryMax = 30 * time.Second
)

// ErrDatabaseUnavailable: Postgres could not be reached at start-up.
var ErrDatabaseUnavailable = errors.New("the database cannot be reached")

// openStore opens the store of LLMQ_DATABASE_URL. A worker or an API whose
// database is down retries with backoff, logging why, until it answers or
// ctx ends (Postgres restarted, or started after llmq, is normal in a
// deployment); a one-shot command fails at once, and so does an answer
// retrying cannot change (no such database, the credentials refused).
func (a *App) openStore(ctx context.Context, opts ...store.Option) (*store.Store, error) {
	url := a.cfg.Settings.DatabaseURL
	retry := a.cfg.Worker != nil || a.cfg.API != nil
	policy := backoff.Policy{Base: DatabaseRetryMin, Max: DatabaseRetryMax}
	for attempt := 1; ; attempt++ {
		st, err := store.Open(ctx, url, opts...)
		switch {
		case err == nil:
			if attempt > 1 {
				a.log.Info("database reachable", slog.String("database", redact.URL(url)), slog.Int("attempts", attempt))
			}
			return st, nil
		case !retry || !transientDatabaseError(err) || ctx.Err() != nil:
			return nil, err
		}
		wait := policy.Exp(attempt - 1)
		a.log.Warn("database unavailable at start-up; retrying", slog.String("database", redact.URL(url)),
			slog.Int("attempt", attempt), slog.Duration("retry_in", wait), slog.Any("error", err))
		t := a.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w: %s: %w (gave up: %w)", ErrDatabaseUnavailable, redact.URL(url), err, context.Cause(ctx))
		case <-t.Chan():
		}
	}
}

// transientDatabaseError reports whether err, from store.Open or a first
// query, may pass by itself: no answer (refused, reset, timed out) or a server starting up,
// shutting down or full; not a missing database, refused credentials or a
// bad URL.
func transientDatabaseError(err error) bool {
	if errors.Is(err, store.ErrNoDatabase) {
		return false
	}
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		// Class 57: operator intervention (57P01 admin shutdown, 57P03
		// cannot connect now); class 53: insufficient resources (too many
		// connections). Others (28: the credentials) stay.
		return strings.HasPrefix(pgErr.Code, "57") || strings.HasPrefix(pgErr.Code, "53")
	}
	_, badURL := errors.AsType[*pgconn.ParseConfigError](err)
	return !badURL
}

// waitingForDatabase wraps the start of a part (name) whose start reads
// the database: Postgres may go away again between the store's opening
// and the part's start, so a transient failure is retried as openStore
// retries, logging why, until Start's context ends.
func (a *App) waitingForDatabase(name string, start func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		policy := backoff.Policy{Base: DatabaseRetryMin, Max: DatabaseRetryMax}
		for attempt := 1; ; attempt++ {
			err := start(ctx)
			if err == nil || !transientDatabaseError(err) || a.starting.Err() != nil {
				return err
			}
			wait := policy.Exp(attempt - 1)
			a.log.Warn("database unavailable at start-up; retrying", slog.String("part", name),
				slog.Int("attempt", attempt), slog.Duration("retry_in", wait), slog.Any("error", err))
			t := a.clock.NewTimer(wait)
			select {
			case <-a.starting.Done():
				t.Stop()
				return fmt.Errorf("%w: %s: %w (gave up: %w)", ErrDatabaseUnavailable, name, err, context.Cause(a.starting))
			case <-t.Chan():
			}
		}
	}
}
