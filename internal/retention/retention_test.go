package retention_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/retention"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestPrunerPrunesOnItsTimer: a started pruner prunes at once, counts what
// it deleted and measures the tables; an Interval later it prunes what has
// aged since. Jobs younger than their period stay.
func TestPrunerPrunesOnItsTimer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, db, clock, finished := setup(t)
	finished("old", 8*24*time.Hour)
	finished("young", 7*24*time.Hour-time.Hour)

	reg := prometheus.NewPedanticRegistry()
	p, err := retention.New(retention.Config{Store: s, Interval: time.Minute, Registerer: reg, Clock: clock})
	require.NoError(t, err)
	require.NoError(t, p.Start(ctx))
	t.Cleanup(func() { require.NoError(t, p.Stop(ctx)) })

	require.Eventually(t, func() bool { // the first prune, measured
		return value(t, reg, "llmq_store_table_bytes", "jobs") > 0
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 1.0, value(t, reg, "llmq_retention_deleted_total", "jobs"))

	clock.Advance(2 * time.Hour) // "young" is past its 7 days; the ticker fires
	require.Eventually(t, func() bool {
		return value(t, reg, "llmq_retention_deleted_total", "jobs") == 2
	}, 10*time.Second, 10*time.Millisecond)
	var left int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM jobs`).Scan(&left))
	require.Zero(t, left)
}

// TestPrunerFoldsTheUsageOnItsTimer: every FoldInterval a started pruner
// folds the rows that finishing jobs added to the day's usage into one per
// scope, and counts them; the usage read is the same.
func TestPrunerFoldsTheUsageOnItsTimer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, db, clock, finished := setup(t)
	finish := func(ids ...string) { // one statement per job: a row each
		for _, id := range ids {
			finished(id, time.Hour)
		}
	}
	rows := func() (n int) {
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM job_usage`).Scan(&n))
		return n
	}
	finish("a", "b", "c")
	require.Equal(t, 3, rows())

	reg := prometheus.NewPedanticRegistry()
	p, err := retention.New(retention.Config{Store: s, Interval: time.Hour, FoldInterval: time.Second, Registerer: reg, Clock: clock})
	require.NoError(t, err)
	require.NoError(t, p.Start(ctx))
	t.Cleanup(func() { require.NoError(t, p.Stop(ctx)) })
	require.NoError(t, clock.BlockUntilContext(ctx, 2)) // both tickers
	clock.Advance(time.Second)
	require.Eventually(t, func() bool { return counter(t, reg, "llmq_usage_folded_total") == 3 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, rows())

	finish("d", "e")
	require.Equal(t, 3, rows())
	clock.Advance(time.Second)
	require.Eventually(t, func() bool { return counter(t, reg, "llmq_usage_folded_total") == 5 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, rows())
	used, err := s.Budgets().Usage(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, []store.ScopeUsage{{Tenant: "acme", DayRequests: 5, DayTokens: 50}}, used)
}

// setup opens a store on a new database with a fake clock, a pool of its
// own on it, and finished, which records a job of tenant acme finished
// (succeeded, one call of 10 tokens) age ago, by one UPDATE.
func setup(t *testing.T) (*store.Store, *pgxpool.Pool, *clockwork.FakeClock, func(id string, age time.Duration)) {
	t.Helper()
	ctx := context.Background()
	url := storetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	s, err := store.Open(ctx, url, store.WithClock(clock))
	require.NoError(t, err)
	t.Cleanup(s.Close)
	db, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	finished := func(id string, age time.Duration) {
		j, err := llmq.Decode([]byte(`{"id":"`+id+`","tenant":"acme","body":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`), llmq.DecodeOptions{})
		require.NoError(t, err)
		_, err = s.Jobs().Insert(ctx, j)
		require.NoError(t, err)
		_, err = db.Exec(ctx, `UPDATE jobs SET status = 'succeeded', finished_at = $2, attempts = 1, prompt_tokens = 10
			WHERE id = $1`, id, clock.Now().Add(-age))
		require.NoError(t, err)
	}
	return s, db, clock, finished
}

// counter is the value of the unlabelled counter name (0 before its first
// count).
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// value is the value of the series of family name whose one label has
// the value label (0 when there is none yet).
func value(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == label {
				if c := m.GetCounter(); c != nil {
					return c.GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

func TestConfigRefusesShortTombstones(t *testing.T) {
	t.Parallel()
	_, err := retention.New(retention.Config{Store: nil, Tombstones: time.Hour})
	require.ErrorContains(t, err, "Config.Store is required")
	require.ErrorContains(t, err, "Config.Tombstones (1h0m0s) must be at least 24h")
}
