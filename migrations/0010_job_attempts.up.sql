-- 0010_job_attempts: every upstream call of a job (docs/design/queue-of-record.md).
--
-- One row per call: seq numbers the job's calls for good, attempt as
-- jobs.attempts counts them (a replay of a dead letter starts that count
-- again and keeps the rows of the earlier run). The holder's
-- MarkCalling inserts the row in the statement that counts the call
-- (model, start, the waits before it); the write that follows the answer
-- (MarkRetrying, StoreResult, the next MarkCalling after a fallback, else
-- a statement of its own) fills in the outcome. A row left without an end
-- is a call whose holder died before recording its answer.
-- The console's job page and GET /v1/stats/models read it; the rows go
-- with their job (ON DELETE CASCADE: retention's prune deletes them too).
CREATE TABLE job_attempts (
    tenant            text        NOT NULL,
    job_id            text        NOT NULL,
    seq               integer     NOT NULL CHECK (seq > 0),
    attempt           integer     NOT NULL CHECK (attempt > 0),
    model             text        NOT NULL,
    started_at        timestamptz NOT NULL,
    -- Milliseconds the job waited for admission (quota, concurrency,
    -- pacing) and in backoff before this call.
    quota_wait_ms     bigint      NOT NULL DEFAULT 0 CHECK (quota_wait_ms >= 0),
    backoff_ms        bigint      NOT NULL DEFAULT 0 CHECK (backoff_ms >= 0),
    finished_at       timestamptz,
    -- The HTTP status of the answer, 0 when none arrived (a timeout, a
    -- reset connection) or the call has not answered.
    status            integer     NOT NULL DEFAULT 0,
    -- What the answer means: success, rate_limited, retryable, permanent
    -- ('' until it answered).
    outcome           text        NOT NULL DEFAULT '',
    error_code        text        NOT NULL DEFAULT '',
    prompt_tokens     integer     NOT NULL DEFAULT 0,
    completion_tokens integer     NOT NULL DEFAULT 0,
    retry_after_ms    bigint,
    -- The limits the answer's x-ratelimit-limit-* headers stated.
    limit_requests    double precision,
    limit_tokens      double precision,
    PRIMARY KEY (tenant, job_id, seq),
    FOREIGN KEY (tenant, job_id) REFERENCES jobs (tenant, id) ON DELETE CASCADE
);
-- The per-model statistics read the calls of a window.
CREATE INDEX job_attempts_started_idx ON job_attempts (started_at);
