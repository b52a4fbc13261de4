-- 0011_budgets: cost budgets per tenant and project, shared by every worker
-- (docs/design/tenants.md#budgets).
--
-- One row per scope (a tenant, project '' ; or one of its projects) and
-- period (a UTC day or month starting at period_start). spent_usd is the
-- settled cost of the scope's calls in the period, reserved_usd the
-- estimates of its calls in flight; a reservation is taken only while
-- spent + reserved + estimate stays within limit_usd, under the row's lock.
-- alerted is the highest threshold (70, 90, 100 percent) already alerted,
-- so each is sent once per scope and period whatever the workers and
-- restarts. hold keeps the scope's queued jobs from the claim until
-- period_end ('low': its low-priority jobs; 'all': every job); with degrade
-- the deferrable ones are still claimed, to move to the Batch API lane.
-- Amounts are numeric: reservations given back return reserved_usd to
-- exactly zero.
CREATE TABLE budgets (
    tenant       text        NOT NULL,
    project      text        NOT NULL,
    period       text        NOT NULL CHECK (period IN ('day', 'month')),
    period_start timestamptz NOT NULL,
    period_end   timestamptz NOT NULL,
    limit_usd    numeric     NOT NULL CHECK (limit_usd > 0),
    spent_usd    numeric     NOT NULL DEFAULT 0,
    reserved_usd numeric     NOT NULL DEFAULT 0 CHECK (reserved_usd >= 0),
    alerted      smallint    NOT NULL DEFAULT 0,
    hold         text        NOT NULL DEFAULT '' CHECK (hold IN ('', 'low', 'all')),
    degrade      boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (tenant, project, period, period_start)
);
-- The claim's probe: the holds of a tenant's scopes.
CREATE INDEX budgets_hold_idx ON budgets (tenant, period_end) WHERE hold <> '';

-- The reservation of one call: what it holds on each budget row, under
-- the lease token of the job's holder. Settled (or given back) after the
-- call; one whose job is no longer held under that token (its worker died)
-- is given back by the reaper.
CREATE TABLE budget_reservations (
    tenant       text        NOT NULL,
    job_id       text        NOT NULL,
    lease_token  bigint      NOT NULL,
    project      text        NOT NULL,
    period       text        NOT NULL,
    period_start timestamptz NOT NULL,
    amount_usd   numeric     NOT NULL CHECK (amount_usd >= 0),
    PRIMARY KEY (tenant, job_id, project, period, period_start),
    FOREIGN KEY (tenant, project, period, period_start) REFERENCES budgets ON DELETE CASCADE
);
