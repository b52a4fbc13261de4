-- 0022_job_queued_notify: undo (workers claim recorded jobs at their tick).
DROP TRIGGER jobs_queued_notify ON jobs;
DROP FUNCTION job_queued_notify();
