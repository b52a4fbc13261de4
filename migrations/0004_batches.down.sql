-- 0004_batches: undo the batch lane's columns, indexes and outbox.
DROP TABLE IF EXISTS batch_outbox;
DROP INDEX IF EXISTS jobs_batch_deadline_idx;
DROP INDEX IF EXISTS jobs_batch_pending_idx;
DROP INDEX IF EXISTS batches_open_idx;
DROP INDEX IF EXISTS batches_provider_batch_idx;
ALTER TABLE batches DROP COLUMN IF EXISTS live_cost_usd;
ALTER TABLE batches DROP COLUMN IF EXISTS cost_usd;
ALTER TABLE batches DROP COLUMN IF EXISTS ingested_at;
ALTER TABLE batches DROP COLUMN IF EXISTS submitted_at;
ALTER TABLE batches DROP COLUMN IF EXISTS provider_batch_id;
