-- 0023_job_free_attempts: undo (a job claimed again counts its free
-- attempts toward retry.max_attempts).
ALTER TABLE jobs DROP COLUMN free_attempts;
