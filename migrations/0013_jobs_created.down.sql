-- 0013_jobs_created: undo.
DROP INDEX IF EXISTS jobs_created_idx;
