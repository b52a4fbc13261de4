-- 0005_queue_of_record: undo. Going back needs job ids unique across
-- tenants again: the primary key on id alone fails if two tenants share one.
UPDATE dead_letters SET letter_key = 'job:' || substr(letter_key, length('job:' || tenant || '/') + 1)
    WHERE starts_with(letter_key, 'job:' || tenant || '/');
DROP INDEX IF EXISTS dead_letters_job_idx;
CREATE INDEX dead_letters_job_idx ON dead_letters (job_id) WHERE job_id <> '';

ALTER TABLE batch_outbox DROP CONSTRAINT batch_outbox_pkey;
ALTER TABLE batch_outbox ADD CONSTRAINT batch_outbox_pkey PRIMARY KEY (job_id);
ALTER TABLE batch_outbox DROP COLUMN IF EXISTS tenant;

DROP TABLE IF EXISTS model_state;
DROP INDEX IF EXISTS jobs_queued_deadline_idx;
DROP INDEX IF EXISTS jobs_deferrable_idx;
DROP INDEX IF EXISTS jobs_lease_owner_idx;
DROP INDEX IF EXISTS jobs_claim_idx;
ALTER TABLE jobs
    DROP CONSTRAINT IF EXISTS jobs_phase_check,
    DROP COLUMN IF EXISTS rate_limited,
    DROP COLUMN IF EXISTS model_index,
    DROP COLUMN IF EXISTS retries,
    DROP COLUMN IF EXISTS est_output_tokens,
    DROP COLUMN IF EXISTS est_prompt_tokens,
    DROP COLUMN IF EXISTS sched_key,
    DROP COLUMN IF EXISTS phase,
    DROP COLUMN IF EXISTS lease_token;

ALTER TABLE jobs DROP CONSTRAINT jobs_pkey;
ALTER TABLE jobs ADD CONSTRAINT jobs_pkey PRIMARY KEY (id);
