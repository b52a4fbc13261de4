-- 0023_job_free_attempts: how many of a job's attempts were free (calls
-- that failed for a provider outage within retry.outage_limit), kept with
-- the rest of the worker's policy state so that a worker that claims the
-- job again counts only its paid attempts toward retry.max_attempts.
ALTER TABLE jobs ADD COLUMN free_attempts integer NOT NULL DEFAULT 0;
