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
// today (UTC), ordered by tenant then project; tenant "" reads every
// tenant. A job counts when it finishes, whatever its status, and keeps
// counting once retention has deleted it.
//
// The day is summed from job_usage (migration 0020): a few rows per scope,
// which the jobs' own statements add as they finish and FoldUsage folds,
// so its cost does not grow with the jobs finished today. The last minute
// is read from those jobs, index only (jobs_tenant_finished_idx). With
// 200,000 jobs finished today, every tenant's usage took 25-39 ms summed
// from the jobs (117-135 ms under more load), and takes 0.4-0.8 ms; a
// tenant's 3.2-5.5 ms, now 0.3-0.6 ms (docs/bench/million/sql.md).
func (s *Store) Usage(ctx context.Context, tenant string) ([]ScopeUsage, error) {
	now := s.clock()
	day := now.Truncate(24 * time.Hour)
	args := []any{day, now.Add(-time.Minute)}
	scope := ""
	if tenant != "" {
		// A condition of its own, not ($3 = '' OR tenant = $3), which a
		// generic plan could not take to the index.
		scope, args = "AND tenant = $3", append(args, tenant)
	}
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

// usageSQL sums the usage of day $1 per tenant and project (its folded row
// and the rows added since, each read on its partial index), and the calls
// and tokens of the jobs of the tenants found finished after $2 that day;
// scope narrows the tenants ("AND tenant = $3"). A scope is listed while
// its jobs finished that day count more than zero (a replayed dead letter
// takes its job back).
func usageSQL(scope string) string {
	return `WITH day AS (
		SELECT tenant, project, sum(jobs) AS jobs, sum(calls) AS calls, sum(tokens) AS tokens FROM (
			SELECT tenant, project, jobs, calls, tokens FROM job_usage WHERE day = $1 AND folded ` + scope + `
			UNION ALL
			SELECT tenant, project, jobs, calls, tokens FROM job_usage WHERE day = $1 AND NOT folded ` + scope + `) u
		GROUP BY tenant, project),
	minute AS (
		SELECT t.tenant, j.project, sum(j.calls) AS calls, sum(j.prompt_tokens + j.completion_tokens) AS tokens
		FROM (SELECT DISTINCT tenant FROM day) t CROSS JOIN LATERAL (
			SELECT project, calls, prompt_tokens, completion_tokens FROM jobs
			WHERE tenant = t.tenant AND finished_at > $2 AND finished_at >= $1
				AND finished_at < $1::timestamptz + interval '1 day') j
		GROUP BY t.tenant, j.project)
	SELECT d.tenant, d.project,
		coalesce(m.calls, 0) AS minute_requests, d.calls AS day_requests,
		coalesce(m.tokens, 0) AS minute_tokens, d.tokens AS day_tokens
	FROM day d LEFT JOIN minute m ON m.tenant = d.tenant AND m.project = d.project
	WHERE d.jobs > 0
	ORDER BY d.tenant, d.project`
}

// foldUsageSQL folds up to $1 of the rows the jobs' statements added to
// job_usage into one folded row per day and scope, in one statement: a
// snapshot sees the rows or their sum, never both. Two folds at once fold
// different rows (a row one deleted, the other skips).
const foldUsageSQL = `WITH fresh AS (
	SELECT ctid FROM job_usage WHERE NOT folded LIMIT $1 FOR UPDATE SKIP LOCKED
), gone AS (
	DELETE FROM job_usage u USING fresh f WHERE u.ctid = f.ctid
	RETURNING u.day, u.tenant, u.project, u.jobs, u.calls, u.tokens
), sums AS (
	INSERT INTO job_usage (day, tenant, project, jobs, calls, tokens, folded)
	SELECT day, tenant, project, sum(jobs), sum(calls), sum(tokens), true FROM gone
	GROUP BY day, tenant, project
	ON CONFLICT (day, tenant, project) WHERE folded DO UPDATE SET jobs = job_usage.jobs + excluded.jobs,
		calls = job_usage.calls + excluded.calls, tokens = job_usage.tokens + excluded.tokens
)
SELECT count(*) FROM gone`

// FoldUsageBatchDefault is the most rows one statement of FoldUsage folds.
const FoldUsageBatchDefault = 10_000

// FoldUsage folds the rows that finishing jobs added to job_usage since
// the last fold into one row per day and scope, in statements of up to
// FoldUsageBatchDefault rows, and returns how many it folded. Usage is
// exact without it; it keeps Usage's read to a few rows per scope.
// Several processes may fold at once.
func (s *Store) FoldUsage(ctx context.Context) (int64, error) {
	var total int64
	for {
		var n int64
		if err := s.pool.QueryRow(ctx, foldUsageSQL, FoldUsageBatchDefault).Scan(&n); err != nil {
			return total, fmt.Errorf("store: fold usage: %w", err)
		}
		total += n
		if n < FoldUsageBatchDefault {
			return total, nil
		}
	}
}
