package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ScopeUsage is what one scope, a tenant or one of its projects, used: the
// upstream calls and the tokens of its jobs that finished in the last
// minute and since the start of the UTC day.
type ScopeUsage struct {
	Tenant string `db:"tenant"`
	// Project is "" for the tenant's jobs that name no project.
	Project string `db:"project"`
	// MinuteRequests and DayRequests count upstream calls (the jobs' attempts,
	// as the column calls holds them once a job finished: migration 0018).
	MinuteRequests int64 `db:"minute_requests"`
	DayRequests    int64 `db:"day_requests"`
	// MinuteTokens and DayTokens sum prompt + completion tokens.
	MinuteTokens int64 `db:"minute_tokens"`
	DayTokens    int64 `db:"day_tokens"`
}

// Usage returns the usage of every (tenant, project) whose jobs finished
// today (UTC), ordered by tenant then project; tenant "" reads every tenant.
// A job counts when it finishes, whatever its status, and keeps counting
// once retention has deleted it. It is summed from job_usage (migration
// 0020), so its cost grows with neither the jobs finished today nor those of
// the last minute (docs/design/tenants.md#usage-1).
func (s *Budgets) Usage(ctx context.Context, tenant string) ([]ScopeUsage, error) {
	scope, args := usageArgs(s.clock(), tenant)
	rows, err := s.pool.Query(ctx, usageSQL(scope), args...)
	if err != nil {
		return nil, fmt.Errorf("store: usage: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[ScopeUsage])
	if err != nil {
		return nil, fmt.Errorf("store: usage: %w", err)
	}
	return out, nil
}

// usageArgs are usageSQL's scope and arguments for the usage at now: the
// UTC day, the start of the last minute, the first whole second after it
// and the start of now's second (the whole seconds between are summed from
// job_usage, the jobs before and after them read one by one).
func usageArgs(now time.Time, tenant string) (string, []any) {
	start := now.Add(-time.Minute)
	args := []any{now.Truncate(24 * time.Hour), start, start.Truncate(time.Second).Add(time.Second), now.Truncate(time.Second)}
	if tenant == "" {
		return "", args
	}
	// A condition of its own, not ($5 = '' OR tenant = $5), which a
	// generic plan could not take to the index.
	return "AND tenant = $5", append(args, tenant)
}

// usageSQL sums the usage of day $1 per tenant and project, each kind of
// row of job_usage read on its partial index, and of the minute after $2:
// its whole seconds [$3, $4) from the rows, the jobs that finished after $2
// and before $3, or from $4 on, from the jobs of the tenants found. scope
// narrows the tenants ("AND tenant = $5"). A scope is listed while its
// jobs finished that day count more than zero (a replayed dead letter
// takes its job back).
func usageSQL(scope string) string {
	return `WITH u AS (
		SELECT span, at, tenant, project, jobs, calls, tokens FROM job_usage
		WHERE span = 'day' AND at = $1 ` + scope + `
		UNION ALL
		SELECT span, at, tenant, project, jobs, calls, tokens FROM job_usage
		WHERE span = 'second' AND at >= $1 AND at < $1::timestamptz + interval '1 day' ` + scope + `
		UNION ALL
		SELECT span, at, tenant, project, jobs, calls, tokens FROM job_usage
		WHERE span = 'fresh' AND at >= $1 AND at < $1::timestamptz + interval '1 day' ` + scope + `),
	day AS (
		SELECT tenant, project, sum(jobs) AS jobs, sum(calls) AS calls, sum(tokens) AS tokens,
			coalesce(sum(calls) FILTER (WHERE span <> 'day' AND at >= $3 AND at < $4), 0) AS minute_calls,
			coalesce(sum(tokens) FILTER (WHERE span <> 'day' AND at >= $3 AND at < $4), 0) AS minute_tokens
		FROM u GROUP BY tenant, project),
	ends AS (
		SELECT t.tenant, j.project, sum(j.calls) AS calls, sum(j.prompt_tokens + j.completion_tokens) AS tokens
		FROM (SELECT DISTINCT tenant FROM day) t CROSS JOIN LATERAL (
			SELECT project, calls, prompt_tokens, completion_tokens FROM jobs
			WHERE tenant = t.tenant AND finished_at > $2 AND finished_at < $3 AND finished_at >= $1
			UNION ALL
			SELECT project, calls, prompt_tokens, completion_tokens FROM jobs
			WHERE tenant = t.tenant AND finished_at >= $4 AND finished_at >= $1
				AND finished_at < $1::timestamptz + interval '1 day') j
		GROUP BY t.tenant, j.project)
	SELECT d.tenant, d.project,
		d.minute_calls + coalesce(e.calls, 0) AS minute_requests, d.calls AS day_requests,
		d.minute_tokens + coalesce(e.tokens, 0) AS minute_tokens, d.tokens AS day_tokens
	FROM day d LEFT JOIN ends e ON e.tenant = d.tenant AND e.project = d.project
	WHERE d.jobs > 0
	ORDER BY d.tenant, d.project`
}

// foldUsageSQL folds up to $1 of the rows the jobs' statements added to
// job_usage, in one statement: those of a second from $2 on into that
// second's row of their scope, the older ones, and the second rows older
// than $2, into their UTC day's. A snapshot sees the rows or their sums,
// never both. The statement locks the rows of its scopes in no set order,
// so two at once can deadlock: FoldUsage runs one at a time.
const foldUsageSQL = `WITH fresh AS (
	SELECT ctid FROM job_usage WHERE span = 'fresh' LIMIT $1 FOR UPDATE SKIP LOCKED
), gone AS (
	DELETE FROM job_usage u USING fresh f WHERE u.ctid = f.ctid
	RETURNING u.at, u.tenant, u.project, u.jobs, u.calls, u.tokens
), aged AS (
	DELETE FROM job_usage WHERE span = 'second' AND at < $2
	RETURNING at, tenant, project, jobs, calls, tokens
), seconds AS (
	INSERT INTO job_usage (span, at, tenant, project, jobs, calls, tokens)
	SELECT 'second', at, tenant, project, sum(jobs), sum(calls), sum(tokens) FROM gone WHERE at >= $2
	GROUP BY at, tenant, project
	ON CONFLICT (at, tenant, project) WHERE span = 'second' DO UPDATE SET jobs = job_usage.jobs + excluded.jobs,
		calls = job_usage.calls + excluded.calls, tokens = job_usage.tokens + excluded.tokens
), days AS (
	INSERT INTO job_usage (span, at, tenant, project, jobs, calls, tokens)
	SELECT 'day', date_trunc('day', at, 'UTC'), tenant, project, sum(jobs), sum(calls), sum(tokens) FROM (
		SELECT * FROM gone WHERE at < $2 UNION ALL SELECT * FROM aged) o
	GROUP BY 2, tenant, project
	ON CONFLICT (at, tenant, project) WHERE span = 'day' DO UPDATE SET jobs = job_usage.jobs + excluded.jobs,
		calls = job_usage.calls + excluded.calls, tokens = job_usage.tokens + excluded.tokens
)
SELECT count(*) FROM gone`

// FoldUsageBatchDefault is the most rows one statement of FoldUsage folds.
const FoldUsageBatchDefault = 10_000

// usageBySecond is how long job_usage keeps a scope's usage by the second
// before FoldUsage folds it into the day's: the last minute is summed from
// these rows, so the clocks of the processes that fold and read the usage
// may differ by up to a minute.
const usageBySecond = 2 * time.Minute

// FoldUsage folds the rows that finishing jobs added to job_usage since
// the last fold, in statements of up to FoldUsageBatchDefault rows, and
// returns how many it folded. Usage is exact without it; it keeps Usage's
// read to a few rows per scope. Several processes may call it at once:
// each statement runs under a transaction's advisory lock, and a process
// that finds another folding leaves the rows to it.
func (s *Store) FoldUsage(ctx context.Context) (int64, error) {
	cutoff := s.clock().Add(-usageBySecond)
	var total int64
	for {
		n, err := s.foldUsage(ctx, cutoff)
		if err != nil {
			return total, fmt.Errorf("store: fold usage: %w", err)
		}
		total += n
		if n < FoldUsageBatchDefault {
			return total, nil
		}
	}
}

// foldUsage runs one foldUsageSQL unless another process holds the fold's
// lock, when it folds nothing.
func (s *Store) foldUsage(ctx context.Context, cutoff time.Time) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var got bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(hashtextextended('llmq.fold_usage', 0))`).Scan(&got); err != nil || !got {
			return err
		}
		return tx.QueryRow(ctx, foldUsageSQL, FoldUsageBatchDefault, cutoff).Scan(&n)
	})
	return n, err
}
