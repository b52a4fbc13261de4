-- 0009_tenants: undo.
DROP TABLE IF EXISTS fair_share;
CREATE INDEX IF NOT EXISTS jobs_claim_idx ON jobs (requested_model, sched_key) WHERE status = 'queued';
DROP INDEX IF EXISTS jobs_fair_idx;
ALTER TABLE jobs DROP COLUMN IF EXISTS project;
