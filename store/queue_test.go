package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
)

// TestCallIsHeapOnly: of the three updates a job makes on its way (claim,
// call, result), the call's (MarkCalling) changes no indexed column, so
// Postgres writes it as a heap-only tuple, without an index entry
// (migration 0018); the claim and the result change the status, which the
// indexes name, and cannot be.
func TestCallIsHeapOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(storetest.NewDB(t))
	require.NoError(t, err)
	// One connection does every update, so flushing its statistics makes
	// them all visible.
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var version int
	require.NoError(t, pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version))
	if version < 150000 {
		t.Skip("pg_stat_force_next_flush needs PostgreSQL 15")
	}
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	b := &testBundle{ctx: ctx, store: store.New(pool, store.WithClock(clock)), clock: clock}
	t.Cleanup(b.store.Close)
	// updates reads the updates of jobs so far, and how many were HOT.
	updates := func() (upd, hot int) {
		t.Helper()
		// The backend reports its counts to the statistics as it goes
		// idle after this statement, not up to 10 s later.
		_, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		require.NoError(t, err)
		require.NoError(t, pool.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
			WHERE relid = 'jobs'::regclass`).Scan(&upd, &hot))
		return upd, hot
	}

	l := b.claimOne(t, "j")
	upd, hot := updates()
	require.Equal(t, [2]int{1, 0}, [2]int{upd, hot}, "the claim")
	// Time passes between the updates (updated_at changes with each).
	clock.Advance(time.Second)
	_, err = b.store.MarkCalling(ctx, l, store.PolicyState{Call: store.Call{Model: "big"}})
	require.NoError(t, err)
	upd, hot = updates()
	require.Equal(t, [2]int{2, 1}, [2]int{upd, hot}, "the call is heap-only")
	clock.Advance(time.Second)
	stored, err := b.store.StoreResult(ctx, l.Key, store.Result{Response: []byte(`{"id":"c"}`), UsedModel: "big"})
	require.NoError(t, err)
	require.True(t, stored)
	upd, hot = updates()
	require.Equal(t, [2]int{3, 1}, [2]int{upd, hot}, "the result")
}
