-- 0032_job_queued_announced: undo (the trigger of 0022_job_queued_notify
-- announces the models again).
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
