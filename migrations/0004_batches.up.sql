-- 0004_batches: state the batch lane needs to survive restarts.
--
-- batches.id is llmq's own id (lb_<uuid>), chosen before anything is sent to
-- the provider, so a batch can be recorded as 'submitting' with its jobs
-- reserved (jobs.batch_id) before the upload; provider_batch_id is filled
-- when the provider accepted the batch.

ALTER TABLE batches ADD COLUMN provider_batch_id text NOT NULL DEFAULT '';
ALTER TABLE batches ADD COLUMN submitted_at timestamptz;
ALTER TABLE batches ADD COLUMN ingested_at timestamptz;
ALTER TABLE batches ADD COLUMN cost_usd double precision NOT NULL DEFAULT 0;
ALTER TABLE batches ADD COLUMN live_cost_usd double precision NOT NULL DEFAULT 0;

CREATE UNIQUE INDEX batches_provider_batch_idx ON batches (provider_batch_id) WHERE provider_batch_id <> '';
-- Batches the poller still follows (not yet ingested).
CREATE INDEX batches_open_idx ON batches (created_at) WHERE ingested_at IS NULL;

-- Jobs waiting for the collector: routed to the batch lane, not yet in a batch.
CREATE INDEX jobs_batch_pending_idx ON jobs (requested_model, updated_at)
    WHERE lane = 'batch' AND status = 'queued' AND batch_id = '';
-- Deferrable jobs with a deadline in the batch lane (deadline pull-back).
CREATE INDEX jobs_batch_deadline_idx ON jobs (deadline)
    WHERE lane = 'batch' AND deadline IS NOT NULL AND status IN ('queued', 'batched');

-- Outbox of jobs the batch lane handed back: written in the same transaction
-- as the job's state change, deleted once the job's message is republished
-- (action 'requeue') or its dead letter published (action 'dead_letter').
CREATE TABLE batch_outbox (
    job_id        text        PRIMARY KEY,
    action        text        NOT NULL,
    reason        text        NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT batch_outbox_action_check CHECK (action IN ('requeue', 'dead_letter'))
);
