-- 0013_jobs_created: an operator's job listing (every tenant, newest first,
-- keyset paging on (created_at, id): GET /v1/jobs and the console's jobs
-- page) reads an index range instead of sorting the whole table: 2.3 s at
-- 1,000,000 jobs without it. The per-tenant listings have
-- jobs_tenant_created_idx.
CREATE INDEX jobs_created_idx ON jobs (created_at, id);
