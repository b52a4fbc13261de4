-- 0018_hot_updates: undo (the batch lane's indexes on updated_at again, the
-- usage index on attempts).
ALTER TABLE jobs RESET (fillfactor);
DROP INDEX jobs_tenant_finished_idx;
ALTER TABLE jobs DROP COLUMN calls;
CREATE INDEX jobs_tenant_finished_idx ON jobs (tenant, finished_at)
    INCLUDE (project, attempts, prompt_tokens, completion_tokens) WHERE finished_at IS NOT NULL;
CREATE INDEX jobs_lease_owner_idx ON jobs (lease_owner) WHERE status IN ('running', 'retrying');
DROP INDEX jobs_deferrable_idx;
CREATE INDEX jobs_deferrable_idx ON jobs (requested_model, updated_at)
    WHERE status = 'queued' AND "deferrable" AND lane = 'live' AND lane_reason = '';
DROP INDEX jobs_batch_pending_idx;
CREATE INDEX jobs_batch_pending_idx ON jobs (requested_model, updated_at)
    WHERE lane = 'batch' AND status = 'queued' AND batch_id = '';
