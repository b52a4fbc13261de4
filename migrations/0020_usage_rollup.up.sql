-- 0020_usage_rollup: what a scope used today (GET /v1/usage) is summed
-- from a few rows per tenant, project and UTC day instead of from every job
-- finished today: every tenant's usage read 200,000 index entries for
-- 200,000 jobs finished today (117-135 ms; docs/bench/million/sql.md).
--
-- Each row of job_usage is a signed contribution: jobs finished, their
-- upstream calls (jobs.calls) and tokens (prompt + completion). A scope's
-- usage over a period is the sum of its rows in it. A statement-level
-- trigger adds the rows, one per second, tenant and project whose jobs an
-- UPDATE of jobs changed, in the statement's own transaction: a job's usage
-- is committed with its finish, so a snapshot that sees the job sees its
-- usage, whatever the period boundaries and the writers running at once. An
-- UPDATE adds its new rows' usage and takes away its old rows' (a job that
-- finishes adds, a dead letter replayed takes its finished attempt back, a
-- claim or a call changes nothing and adds no row). Jobs are recorded
-- queued, so an INSERT has no usage to add; a job recorded finished by hand
-- (a benchmark's seed) needs its row added likewise. The trigger only
-- inserts, so concurrent writers never wait for each other on these rows.
-- Every few seconds the retention loop (store.FoldUsage) folds them, in one
-- statement: into one row per second and scope for the last two minutes,
-- and into one per UTC day and scope before. A day's usage sums at most a
-- scope's day row, its 120 second rows and what finished since the last
-- fold; the last minute, its whole seconds from these rows and the two
-- seconds at its ends from the jobs. Deleting a job (retention) leaves the
-- usage it added: a pruned job still finished that day.
CREATE TABLE job_usage (
    -- fresh: a statement's, at the second its jobs finished; second: the
    -- fresh rows of one second and scope folded, for the last minutes;
    -- day: the rest of a UTC day folded, at its 00:00.
    span text NOT NULL CHECK (span IN ('fresh', 'second', 'day')),
    at timestamptz NOT NULL,
    tenant text NOT NULL,
    project text NOT NULL,
    jobs bigint NOT NULL,
    calls bigint NOT NULL,
    tokens bigint NOT NULL
);
CREATE INDEX job_usage_fresh_idx ON job_usage (at, tenant, project) WHERE span = 'fresh';
CREATE UNIQUE INDEX job_usage_second_key ON job_usage (at, tenant, project) WHERE span = 'second';
CREATE UNIQUE INDEX job_usage_day_key ON job_usage (at, tenant, project) WHERE span = 'day';

CREATE FUNCTION job_usage_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_usage (span, at, tenant, project, jobs, calls, tokens)
    SELECT 'fresh', at, tenant, project, sum(jobs), sum(calls), sum(tokens) FROM (
        SELECT date_trunc('second', finished_at) AS at, tenant, project, 1 AS jobs, calls,
            prompt_tokens + completion_tokens AS tokens
        FROM new_jobs WHERE finished_at IS NOT NULL
        UNION ALL
        SELECT date_trunc('second', finished_at), tenant, project, -1, -calls,
            -(prompt_tokens + completion_tokens)
        FROM old_jobs WHERE finished_at IS NOT NULL) c
    GROUP BY at, tenant, project
    HAVING sum(jobs) <> 0 OR sum(calls) <> 0 OR sum(tokens) <> 0;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_usage_update AFTER UPDATE ON jobs REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION job_usage_update();

-- The jobs finished before, from jobs_tenant_finished_idx (0.15 s for
-- 200,000; the trigger's lock on jobs holds writers back until this
-- transaction commits): those of the last five minutes by the second,
-- the others by the day.
INSERT INTO job_usage (span, at, tenant, project, jobs, calls, tokens)
SELECT span, at, tenant, project, count(*), sum(calls), sum(prompt_tokens + completion_tokens)
FROM jobs, LATERAL (SELECT CASE WHEN finished_at >= now() - interval '5 minutes' THEN 'second' ELSE 'day' END AS span) k,
    LATERAL (SELECT CASE WHEN span = 'second' THEN date_trunc('second', finished_at)
        ELSE date_trunc('day', finished_at, 'UTC') END AS at) t
WHERE finished_at IS NOT NULL
GROUP BY span, at, tenant, project;
