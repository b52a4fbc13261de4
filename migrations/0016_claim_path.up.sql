-- 0016_claim_path: the claim reads each tenant's queued jobs in the whole
-- claim order (ClaimOrderDefault: sched_key, created_at, id), so a claim
-- of n jobs reads n index entries. With sched_key alone the jobs of one
-- ingest batch (one created_at, so one sched_key) tie, and every claim
-- read and sorted the whole tie, up to a batch of 512 jobs, to take a few.
DROP INDEX jobs_fair_idx;
CREATE INDEX jobs_fair_idx ON jobs (requested_model, tenant, sched_key, created_at, id) WHERE status = 'queued';
