-- 0021_attempts_tenant_started: a tenant's statistics of calls
-- (GET /v1/stats/models) read its own calls of the window, not every
-- tenant's calls of it filtered by tenant (job_attempts_started_idx).
-- The answer to a call changes neither column, so it stays a heap-only
-- update (migration 0019); the insert before the call writes one more
-- index entry.
CREATE INDEX job_attempts_tenant_started_idx ON job_attempts (tenant, started_at);
