-- 0016_claim_path: undo.
DROP INDEX jobs_fair_idx;
CREATE INDEX jobs_fair_idx ON jobs (requested_model, tenant, sched_key) WHERE status = 'queued';
