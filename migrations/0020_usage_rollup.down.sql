-- 0020_usage_rollup: undo (the usage is read from the jobs again).
DROP TRIGGER jobs_usage_update ON jobs;
DROP FUNCTION job_usage_update();
DROP TABLE job_usage;
