-- 0017_hot_updates: undo (the batch lane's indexes on updated_at again).
ALTER TABLE jobs RESET (fillfactor);
CREATE INDEX jobs_lease_owner_idx ON jobs (lease_owner) WHERE status IN ('running', 'retrying');
DROP INDEX jobs_deferrable_idx;
CREATE INDEX jobs_deferrable_idx ON jobs (requested_model, updated_at)
    WHERE status = 'queued' AND "deferrable" AND lane = 'live' AND lane_reason = '';
DROP INDEX jobs_batch_pending_idx;
CREATE INDEX jobs_batch_pending_idx ON jobs (requested_model, updated_at)
    WHERE lane = 'batch' AND status = 'queued' AND batch_id = '';
