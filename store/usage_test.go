package store_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// TestUsage sums the calls and tokens of the jobs that finished, per
// tenant and project, over the last minute and the UTC day.
func TestUsage(t *testing.T) {
	t.Parallel()
	b := setup(t) // 12:00 UTC
	finish := func(id, tenant, project string, calls, prompt, completion int) {
		j := newJob(t, id)
		j.Tenant, j.Project = tenant, project
		l := b.hold(t, "w", j)[id]
		for range calls {
			_, err := b.store.Queue().MarkCalling(b.ctx, l, store.PolicyState{})
			require.NoError(t, err)
		}
		_, err := b.store.Queue().StoreResult(b.ctx, l.Key, store.Result{UsedModel: "big", PromptTokens: prompt, CompletionTokens: completion})
		require.NoError(t, err)
	}
	finish("yesterday", "acme", "", 4, 5000, 5000)
	b.clock.Advance(12 * time.Hour)          // 00:00 UTC
	finish("old", "acme", "", 1, 1000, 1000) // today, not in the last minute
	b.clock.Advance(2 * time.Minute)
	finish("a1", "acme", "", 2, 10, 5)
	finish("a2", "acme", "support", 1, 20, 7)
	finish("o1", "other", "", 1, 3, 1)
	_, err := b.store.Jobs().Insert(b.ctx, newJob(t, "queued")) // not finished: not counted
	require.NoError(t, err)

	all, err := b.store.Budgets().Usage(b.ctx, "")
	require.NoError(t, err)
	require.Equal(t, []store.ScopeUsage{
		{Tenant: "acme", MinuteRequests: 2, DayRequests: 3, MinuteTokens: 15, DayTokens: 2015},
		{Tenant: "acme", Project: "support", MinuteRequests: 1, DayRequests: 1, MinuteTokens: 27, DayTokens: 27},
		{Tenant: "other", MinuteRequests: 1, DayRequests: 1, MinuteTokens: 4, DayTokens: 4},
	}, all)

	mine, err := b.store.Budgets().Usage(b.ctx, "other")
	require.NoError(t, err)
	require.Equal(t, all[2:], mine, "one tenant's")
}

// rowByRowSQL is the usage summed from the jobs themselves, as Usage read
// it before job_usage (migration 0020): the answer job_usage must give.
func rowByRowSQL(scope string) string {
	return `SELECT tenant, project,
			coalesce(sum(calls) FILTER (WHERE finished_at > $2), 0) AS minute_requests,
			coalesce(sum(calls), 0) AS day_requests,
			coalesce(sum(prompt_tokens + completion_tokens) FILTER (WHERE finished_at > $2), 0) AS minute_tokens,
			coalesce(sum(prompt_tokens + completion_tokens), 0) AS day_tokens
		FROM jobs WHERE finished_at >= $1 AND finished_at < $1::timestamptz + interval '1 day' ` + scope + `
		GROUP BY tenant, project ORDER BY tenant, project`
}

// usageBoth reads, in one snapshot, the usage as Usage sums it at now and
// as the jobs sum it row by row (those finished on now's UTC day, and
// after the minute before now); tenant "" reads every tenant.
func usageBoth(t *testing.T, ctx context.Context, pool *pgxpool.Pool, now time.Time, tenant string) (summed, rows []store.ScopeUsage) {
	t.Helper()
	sql, args := store.UsageSQL(now, tenant)
	scope, rowArgs := "", []any{now.Truncate(24 * time.Hour), now.Add(-time.Minute)}
	if tenant != "" {
		scope, rowArgs = "AND tenant = $3", append(rowArgs, tenant)
	}
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		for _, q := range []struct {
			sql  string
			args []any
			out  *[]store.ScopeUsage
		}{{sql, args, &summed}, {rowByRowSQL(scope), rowArgs, &rows}} {
			r, err := tx.Query(ctx, q.sql, q.args...)
			if err != nil {
				return err
			}
			if *q.out, err = pgx.CollectRows(r, pgx.RowToStructByName[store.ScopeUsage]); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
	return summed, rows
}

// TestUsageExactWhileJobsFinish: while 8 writers finish 240 jobs of two
// tenants, with a project and without, across midnight UTC, and two folds
// run at once again and again, every snapshot's usage summed from
// job_usage equals the jobs' own sums, for both days, every tenant and
// one; at the end, folded to one row per day and scope, still.
func TestUsageExactWhileJobsFinish(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.clock.Advance(11*time.Hour + 59*time.Minute + 30*time.Second) // 23:59:30 UTC
	const n = 240
	var jobs []*llmq.Job
	for i := range n {
		j := newJob(t, fmt.Sprintf("j%03d", i))
		j.Tenant, j.Project = []string{"acme", "other"}[i%2], []string{"", "", "support"}[i%3]
		jobs = append(jobs, j)
	}
	leases := b.hold(t, "w", jobs...)
	require.Len(t, leases, n)
	keys := make(chan store.Lease, n)
	for _, j := range jobs {
		keys <- leases[j.ID]
	}
	close(keys)

	day0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	day1 := day0.Add(24 * time.Hour)
	check := func() { // day0 read at its last microsecond, day1 now
		for _, at := range []time.Time{day1.Add(-time.Microsecond), b.clock.Now()} {
			for _, tenant := range []string{"", "other"} {
				summed, rows := usageBoth(t, b.ctx, b.store.Pool(), at, tenant)
				require.Equal(t, rows, summed, "at %s, tenant %q", at, tenant)
			}
		}
	}

	var finished atomic.Int64
	writers, _ := errgroup.WithContext(b.ctx)
	for range 8 {
		writers.Go(func() error {
			for l := range keys {
				i, _ := strconv.Atoi(l.ID[1:])
				for range 1 + i%3 {
					if _, err := b.store.Queue().MarkCalling(b.ctx, l, store.PolicyState{}); err != nil {
						return err
					}
				}
				if _, err := b.store.Queue().StoreResult(b.ctx, l.Key, store.Result{UsedModel: "big", PromptTokens: 10 + i,
					CompletionTokens: i % 7}); err != nil {
					return err
				}
				if finished.Add(1) == n/2 {
					b.clock.Advance(time.Minute) // 00:00:30: the rest finish the next day
				}
			}
			return nil
		})
	}
	done := make(chan error, 1)
	go func() { done <- writers.Wait() }()
	var folded atomic.Int64
	for running := true; running; {
		select {
		case err := <-done:
			require.NoError(t, err)
			running = false
		default:
		}
		var folds errgroup.Group // two processes' folds at once
		for range 2 {
			folds.Go(func() error {
				k, err := b.store.FoldUsage(b.ctx)
				folded.Add(k)
				return err
			})
		}
		require.NoError(t, folds.Wait())
		check()
	}
	require.Positive(t, folded.Load(), "the folds ran while the jobs finished")
	_, err := b.store.FoldUsage(b.ctx)
	require.NoError(t, err)
	check()

	var fresh, seconds int
	require.NoError(t, b.store.Pool().QueryRow(b.ctx, `SELECT count(*) FILTER (WHERE span = 'fresh'),
		count(*) FILTER (WHERE span = 'second') FROM job_usage`).Scan(&fresh, &seconds))
	require.Equal(t, []int{0, 2 * 2 * 2}, []int{fresh, seconds}, "one row per second (23:59:30, 00:00:30), tenant and project")
	for _, at := range []time.Time{day1.Add(-time.Microsecond), b.clock.Now()} {
		summed, _ := usageBoth(t, b.ctx, b.store.Pool(), at, "")
		require.Len(t, summed, 4, "both tenants, with and without a project, finished jobs on %s", at.Format(time.DateOnly))
	}
}

// TestFoldsAtOnce: processes that fold at once neither fail nor lose a
// row. Their statements lock the second and day rows of the same scopes,
// in no set order; run together they deadlocked within 50 rounds.
func TestFoldsAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := b.store.Pool()
	const rounds, perRound = 100, 200
	for round := range rounds {
		// Fresh rows of 12 scopes over the last five minutes: some fold
		// into seconds, the rest, with the seconds that aged, into the day.
		_, err := pool.Exec(b.ctx, `INSERT INTO job_usage (span, at, tenant, project, jobs, calls, tokens)
			SELECT 'fresh', $1::timestamptz - s * interval '1 minute', 't' || g % 4, 'p' || g % 3, 1, 2, 3
			FROM generate_series(1, 40) g, generate_series(0, 4) s`, b.clock.Now())
		require.NoError(t, err)
		var folds errgroup.Group
		for range 4 {
			folds.Go(func() error {
				_, err := b.store.FoldUsage(b.ctx)
				return err
			})
		}
		require.NoError(t, folds.Wait(), "round %d", round)
		b.clock.Advance(time.Minute)
	}
	var jobs, calls, tokens int64
	require.NoError(t, pool.QueryRow(b.ctx, `SELECT sum(jobs), sum(calls), sum(tokens) FROM job_usage`).Scan(&jobs, &calls, &tokens))
	require.Equal(t, []int64{rounds * perRound, 2 * rounds * perRound, 3 * rounds * perRound}, []int64{jobs, calls, tokens})
}

// TestUsageAfterReplayAndPrune: a dead letter replayed takes its job's
// finished attempt back out of the day's usage, as the jobs' own sums do,
// folded or not; a job that retention deletes keeps counting (it finished
// that day), where the jobs' sums lose it.
func TestUsageAfterReplayAndPrune(t *testing.T) {
	t.Parallel()
	b := setup(t) // 12:00 UTC
	leases := b.hold(t, "w", newJob(t, "ok"), newJob(t, "dead"))
	for _, l := range leases {
		_, err := b.store.Queue().MarkCalling(b.ctx, l, store.PolicyState{})
		require.NoError(t, err)
	}
	_, err := b.store.Queue().StoreResult(b.ctx, leases["ok"].Key, store.Result{UsedModel: "big", PromptTokens: 100, CompletionTokens: 20})
	require.NoError(t, err)
	letter := newLetter("dead", "acme", "retries_exhausted")
	letter.LeaseToken = leases["dead"].Token
	_, _, err = b.store.DeadLetters().RecordDeadLetter(b.ctx, letter)
	require.NoError(t, err)
	usage := func(want ...store.ScopeUsage) {
		t.Helper()
		got, err := b.store.Budgets().Usage(b.ctx, "acme")
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	usage(store.ScopeUsage{Tenant: "acme", MinuteRequests: 2, DayRequests: 2, MinuteTokens: 120, DayTokens: 120})
	_, err = b.store.FoldUsage(b.ctx)
	require.NoError(t, err)

	_, err = b.store.DeadLetters().Requeue(b.ctx, "acme", "dead")
	require.NoError(t, err)
	usage(store.ScopeUsage{Tenant: "acme", MinuteRequests: 1, DayRequests: 1, MinuteTokens: 120, DayTokens: 120})
	summed, rows := usageBoth(t, b.ctx, b.store.Pool(), b.clock.Now(), "")
	require.Equal(t, rows, summed)

	b.clock.Advance(2 * time.Hour)
	pruned, err := b.store.Prune(b.ctx, store.Retention{Jobs: map[llmq.Status]time.Duration{llmq.StatusSucceeded: time.Hour}})
	require.NoError(t, err)
	require.Equal(t, store.Pruned{"jobs": 1}, pruned)
	usage(store.ScopeUsage{Tenant: "acme", DayRequests: 1, DayTokens: 120})
	_, err = b.store.FoldUsage(b.ctx)
	require.NoError(t, err)
	usage(store.ScopeUsage{Tenant: "acme", DayRequests: 1, DayTokens: 120})
	_, rows = usageBoth(t, b.ctx, b.store.Pool(), b.clock.Now(), "")
	require.Empty(t, rows, "the jobs' own sums lost the pruned job")
}

// TestUsageMinuteBySecond: jobs finish one at a time at uneven instants
// (within a second, at its edges, seconds apart) over four minutes across
// midnight UTC while folds move them from fresh rows to seconds to the
// day; after each, the last minute and the day summed from job_usage equal
// the jobs' own sums, read now and a fraction of a second before.
func TestUsageMinuteBySecond(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.clock.Advance(11*time.Hour + 58*time.Minute) // 23:58 UTC
	steps := []time.Duration{137 * time.Millisecond, 863 * time.Millisecond, time.Second, 2300 * time.Millisecond,
		time.Millisecond, 999 * time.Millisecond, 4 * time.Second}
	for i := 0; b.clock.Now().Before(time.Date(2026, 12, 1, 0, 2, 0, 0, time.UTC)); i++ {
		b.clock.Advance(steps[i%len(steps)])
		id := fmt.Sprintf("j%03d", i)
		j := newJob(t, id)
		j.Project = []string{"", "support"}[i%2]
		l := b.hold(t, "w", j)[id]
		_, err := b.store.Queue().MarkCalling(b.ctx, l, store.PolicyState{})
		require.NoError(t, err)
		_, err = b.store.Queue().StoreResult(b.ctx, l.Key, store.Result{UsedModel: "big", PromptTokens: 1 + i, CompletionTokens: 1000})
		require.NoError(t, err)
		if i%5 == 4 {
			_, err := b.store.FoldUsage(b.ctx)
			require.NoError(t, err)
		}
		for _, at := range []time.Time{b.clock.Now(), b.clock.Now().Add(-300 * time.Millisecond)} {
			summed, rows := usageBoth(t, b.ctx, b.store.Pool(), at, "acme")
			require.Equal(t, rows, summed, "at %s", at.Format(time.StampMicro))
		}
	}
	rows, err := b.store.Pool().Query(b.ctx, `SELECT DISTINCT span FROM job_usage ORDER BY span`)
	require.NoError(t, err)
	spans, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"day", "fresh", "second"}, spans, "the folds moved usage to the day and to seconds")
}
