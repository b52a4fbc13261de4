-- 0022_job_queued_notify: a statement that records queued jobs announces
-- their models on llmq_job_queued when it commits, so every worker replica
-- claims them at once instead of at its next claim tick: jobs recorded by
-- the API (whose message the worker ingests as a duplicate, which wakes
-- nothing) and jobs another replica ingested. One notification per model
-- per statement (Postgres folds equal payloads of one transaction).
CREATE FUNCTION job_queued_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('llmq_job_queued', m.requested_model)
    FROM (SELECT DISTINCT requested_model FROM queued_jobs WHERE status = 'queued') m;
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_queued_notify AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS queued_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION job_queued_notify();
