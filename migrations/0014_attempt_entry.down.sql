-- 0014_attempt_entry: undo.
ALTER TABLE job_attempts DROP COLUMN entry;
