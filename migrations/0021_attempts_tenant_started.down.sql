-- 0021_attempts_tenant_started: undo (a tenant's statistics read every
-- tenant's calls of the window again).
DROP INDEX job_attempts_tenant_started_idx;
