-- 0009_tenants: projects and the fair share between tenants
-- (docs/design/tenants.md).
--
-- project is the job's optional project within its tenant ('' for none).
ALTER TABLE jobs ADD COLUMN project text NOT NULL DEFAULT '';

-- The claim takes each tenant's queued jobs of one model in claim order:
-- one index range per tenant, and a loose scan over it lists the tenants
-- with queued jobs.
CREATE INDEX jobs_fair_idx ON jobs (requested_model, tenant, sched_key) WHERE status = 'queued';
-- It serves the loose scan of the models with queued jobs as well: the
-- claim's index of 0005 has no reader left.
DROP INDEX jobs_claim_idx;

-- Start-time fair queuing between the tenants of one model: vtime is the
-- tenant's virtual finish time, the tokens it was given divided by its
-- weight; the row of tenant '' (no tenant has an empty name) is the
-- model's virtual clock, the smallest start time the last claim took. A
-- tenant coming back from idle starts at the clock, so it banks no credit.
CREATE TABLE fair_share (
    model  text             NOT NULL,
    tenant text             NOT NULL,
    vtime  double precision NOT NULL,
    PRIMARY KEY (model, tenant)
);
