-- 0010_job_attempts: undo.
DROP TABLE IF EXISTS job_attempts;
