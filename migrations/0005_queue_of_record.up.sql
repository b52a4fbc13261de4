-- 0005_queue_of_record: Postgres is the queue of record once a job is
-- ingested (docs/design/queue-of-record.md).
--
-- Job ids are scoped by tenant: the key of a job is (tenant, id), in jobs,
-- in the batch lane's outbox and in the letter keys of dead letters
-- ("job:<tenant>/<id>:<n>"). Existing rows keep their tenant.
--
-- lease_token is incremented by every claim; every change a lease holder
-- makes is fenced to it, so a holder whose lease was taken over changes
-- nothing. phase says what a running job is doing ('' when not running).
-- sched_key is the static claim-order key computed at insert by
-- store.SchedKey: min(created_at + rank(priority) x aging step, deadline -
-- deadline lead); existing rows get it with the defaults (30 s, 1 min).
-- est_prompt_tokens and est_output_tokens are the shaping estimate made at
-- ingest (0 = not estimated yet). attempts counts the upstream calls begun
-- (written before each call); retries, model_index and rate_limited are the
-- rest of the worker's policy state, so a job claimed again goes on where
-- the last holder stopped.

ALTER TABLE jobs DROP CONSTRAINT jobs_pkey;
ALTER TABLE jobs ADD CONSTRAINT jobs_pkey PRIMARY KEY (tenant, id);

ALTER TABLE jobs
    ADD COLUMN lease_token       bigint      NOT NULL DEFAULT 0,
    ADD COLUMN phase             text        NOT NULL DEFAULT '',
    ADD COLUMN sched_key         timestamptz,
    ADD COLUMN est_prompt_tokens integer     NOT NULL DEFAULT 0,
    ADD COLUMN est_output_tokens integer     NOT NULL DEFAULT 0,
    ADD COLUMN retries           integer     NOT NULL DEFAULT 0,
    ADD COLUMN model_index       integer     NOT NULL DEFAULT 0,
    ADD COLUMN rate_limited      integer     NOT NULL DEFAULT 0,
    ADD CONSTRAINT jobs_phase_check CHECK (phase IN ('', 'waiting_for_quota', 'calling', 'backing_off'));

UPDATE jobs SET sched_key = LEAST(
    created_at + (CASE priority WHEN 'high' THEN 0 WHEN 'normal' THEN 1 ELSE 2 END) * interval '30 seconds',
    deadline - interval '1 minute');
ALTER TABLE jobs ALTER COLUMN sched_key SET NOT NULL;

-- The claim: one model's queued jobs in claim order.
CREATE INDEX jobs_claim_idx ON jobs (requested_model, sched_key) WHERE status = 'queued';
-- The heartbeat: the jobs one worker holds.
CREATE INDEX jobs_lease_owner_idx ON jobs (lease_owner) WHERE status IN ('running', 'retrying');
-- The batch lane's candidates: deferrable queued jobs whose lane is undecided.
CREATE INDEX jobs_deferrable_idx ON jobs (requested_model, updated_at)
    WHERE status = 'queued' AND "deferrable" AND lane = 'live' AND lane_reason = '';
-- The reaper's deadline sweep over queued jobs.
CREATE INDEX jobs_queued_deadline_idx ON jobs (deadline) WHERE status = 'queued' AND deadline IS NOT NULL;

-- What each model's schedulers hold back, for the API's waiting_reason:
-- written at most once a second per model and worker while a scheduler
-- leaves queued jobs unclaimed.
CREATE TABLE model_state (
    model          text        PRIMARY KEY,
    waiting_reason text        NOT NULL DEFAULT '',
    batch_hold     boolean     NOT NULL DEFAULT false,
    worker         text        NOT NULL DEFAULT '',
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- A job the batch lane hands back is queued in Postgres, where the
-- schedulers claim it: its message is no longer republished.
DELETE FROM batch_outbox WHERE action = 'requeue';
ALTER TABLE batch_outbox ADD COLUMN tenant text NOT NULL DEFAULT '';
UPDATE batch_outbox o SET tenant = j.tenant FROM jobs j WHERE j.id = o.job_id;
ALTER TABLE batch_outbox ALTER COLUMN tenant DROP DEFAULT;
ALTER TABLE batch_outbox DROP CONSTRAINT batch_outbox_pkey;
ALTER TABLE batch_outbox ADD CONSTRAINT batch_outbox_pkey PRIMARY KEY (tenant, job_id);

DROP INDEX dead_letters_job_idx;
CREATE INDEX dead_letters_job_idx ON dead_letters (tenant, job_id) WHERE job_id <> '';
UPDATE dead_letters SET letter_key = 'job:' || tenant || '/' || substr(letter_key, 5)
    WHERE starts_with(letter_key, 'job:');
