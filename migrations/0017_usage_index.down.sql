-- 0017_usage_index: undo.
DROP INDEX jobs_tenant_finished_idx;
