-- 0001_init: jobs, dead letters and provider batches.
-- DEFERRABLE is a reserved word: the column is always written "deferrable".

CREATE TABLE jobs (
    id                text        PRIMARY KEY,
    tenant            text        NOT NULL,
    status            text        NOT NULL DEFAULT 'queued',
    priority          text        NOT NULL DEFAULT 'normal',
    requested_model   text        NOT NULL,
    used_model        text        NOT NULL DEFAULT '',
    body              jsonb       NOT NULL,
    result            jsonb,
    error_code        text        NOT NULL DEFAULT '',
    error_message     text        NOT NULL DEFAULT '',
    attempts          integer     NOT NULL DEFAULT 0,
    prompt_tokens     integer     NOT NULL DEFAULT 0,
    completion_tokens integer     NOT NULL DEFAULT 0,
    cost_usd          double precision NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL DEFAULT now(),
    started_at        timestamptz,
    finished_at       timestamptz,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    deadline          timestamptz,
    "deferrable"      boolean     NOT NULL DEFAULT false,
    fallback_models   text[]      NOT NULL DEFAULT '{}',
    metadata          jsonb       NOT NULL DEFAULT '{}',
    lease_owner       text        NOT NULL DEFAULT '',
    lease_expires_at  timestamptz,
    batch_id          text        NOT NULL DEFAULT '',
    lane              text        NOT NULL DEFAULT 'live',
    lane_reason       text        NOT NULL DEFAULT '',
    CONSTRAINT jobs_status_check CHECK (status IN (
        'queued', 'running', 'retrying', 'batched',
        'succeeded', 'failed', 'dead_lettered', 'expired', 'cancelled')),
    CONSTRAINT jobs_priority_check CHECK (priority IN ('high', 'normal', 'low')),
    CONSTRAINT jobs_lane_check CHECK (lane IN ('live', 'batch')),
    CONSTRAINT jobs_attempts_check CHECK (attempts >= 0)
);

-- Polling by tenant and status, newest first (GET /v1/jobs?status=...).
CREATE INDEX jobs_tenant_status_created_idx ON jobs (tenant, status, created_at, id);
-- Listing all jobs of a tenant, newest first (GET /v1/jobs).
CREATE INDEX jobs_tenant_created_idx ON jobs (tenant, created_at, id);
-- Queue depth and sweeps (expired leases, deadlines) over live jobs only.
CREATE INDEX jobs_active_status_idx ON jobs (status, lease_expires_at)
    WHERE status IN ('queued', 'running', 'retrying', 'batched');
-- Jobs of one provider batch.
CREATE INDEX jobs_batch_idx ON jobs (batch_id) WHERE batch_id <> '';

CREATE TABLE dead_letters (
    id                 bigserial   PRIMARY KEY,
    job_id             text        NOT NULL DEFAULT '',
    tenant             text        NOT NULL DEFAULT '',
    reason             text        NOT NULL,
    last_error         text        NOT NULL DEFAULT '',
    attempts           integer     NOT NULL DEFAULT 0,
    message            bytea       NOT NULL,
    headers            jsonb       NOT NULL DEFAULT '{}',
    source             text        NOT NULL DEFAULT '',
    created_at         timestamptz NOT NULL DEFAULT now(),
    replayed_at        timestamptz,
    replay_count       integer     NOT NULL DEFAULT 0,
    replay_job_attempt text        NOT NULL DEFAULT ''
);

CREATE INDEX dead_letters_tenant_created_idx ON dead_letters (tenant, created_at, id);
CREATE INDEX dead_letters_reason_created_idx ON dead_letters (reason, created_at);
CREATE INDEX dead_letters_job_idx ON dead_letters (job_id) WHERE job_id <> '';

CREATE TABLE batches (
    id                text        PRIMARY KEY,
    model             text        NOT NULL DEFAULT '',
    status            text        NOT NULL,
    input_file_id     text        NOT NULL DEFAULT '',
    output_file_id    text        NOT NULL DEFAULT '',
    error_file_id     text        NOT NULL DEFAULT '',
    job_count         integer     NOT NULL DEFAULT 0,
    request_total     integer     NOT NULL DEFAULT 0,
    request_completed integer     NOT NULL DEFAULT 0,
    request_failed    integer     NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    completed_at      timestamptz,
    error             text        NOT NULL DEFAULT '',
    metadata          jsonb       NOT NULL DEFAULT '{}'
);

CREATE INDEX batches_status_idx ON batches (status, created_at);
