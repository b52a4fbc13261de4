-- 0020_usage_rollup: what a scope used today (GET /v1/usage) is summed
-- from a few rows per tenant, project and UTC day instead of from every job
-- finished today: every tenant's usage read 200,000 index entries for
-- 200,000 jobs finished today (117-135 ms; docs/bench/million/sql.md).
--
-- Each row of job_usage is a signed contribution: jobs finished, their
-- upstream calls (jobs.calls) and tokens (prompt + completion). A day's
-- usage of a scope is the sum of its rows. A statement-level trigger adds
-- the rows, one per (day, tenant, project) that an UPDATE of jobs changed,
-- in the statement's own transaction: a job's usage is committed with its
-- finish, so a snapshot that sees the job sees its usage, whatever the
-- period boundaries and the writers running at once. An UPDATE adds its new
-- rows' usage and takes away its old rows' (a job that finishes adds, a
-- dead letter replayed takes its finished attempt back, a claim or a call
-- changes nothing and adds no row). Jobs are recorded queued, so an INSERT
-- has no usage to add; a job recorded finished by hand (a benchmark's
-- seed) needs its row added likewise. The rows are only inserted, never
-- updated, so concurrent writers never wait for each other on them. Every
-- few seconds the retention loop (store.FoldUsage) folds the new rows into
-- one folded row per day and scope, in one statement: a reader sums at most
-- a scope's folded row and the rows added since the last fold. Deleting a
-- job (retention) leaves the usage it added: a pruned job still finished
-- that day.
CREATE TABLE job_usage (
    day timestamptz NOT NULL,
    tenant text NOT NULL,
    project text NOT NULL,
    jobs bigint NOT NULL,
    calls bigint NOT NULL,
    tokens bigint NOT NULL,
    folded boolean NOT NULL DEFAULT false
);
CREATE UNIQUE INDEX job_usage_folded_key ON job_usage (day, tenant, project) WHERE folded;
CREATE INDEX job_usage_fresh_idx ON job_usage (day, tenant, project) WHERE NOT folded;

CREATE FUNCTION job_usage_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_usage (day, tenant, project, jobs, calls, tokens)
    SELECT day, tenant, project, sum(jobs), sum(calls), sum(tokens) FROM (
        SELECT date_trunc('day', finished_at, 'UTC') AS day, tenant, project, 1 AS jobs, calls,
            prompt_tokens + completion_tokens AS tokens
        FROM new_jobs WHERE finished_at IS NOT NULL
        UNION ALL
        SELECT date_trunc('day', finished_at, 'UTC'), tenant, project, -1, -calls,
            -(prompt_tokens + completion_tokens)
        FROM old_jobs WHERE finished_at IS NOT NULL) c
    GROUP BY 1, 2, 3
    HAVING sum(jobs) <> 0 OR sum(calls) <> 0 OR sum(tokens) <> 0;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_usage_update AFTER UPDATE ON jobs REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION job_usage_update();

-- The jobs finished before, from jobs_tenant_finished_idx (0.15 s for
-- 200,000; the trigger's lock on jobs holds writers back until this
-- transaction commits).
INSERT INTO job_usage (day, tenant, project, jobs, calls, tokens, folded)
SELECT date_trunc('day', finished_at, 'UTC'), tenant, project, count(*), sum(calls),
    sum(prompt_tokens + completion_tokens), true
FROM jobs WHERE finished_at IS NOT NULL
GROUP BY 1, 2, 3;
