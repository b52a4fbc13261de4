-- 0008_error_status: a job failed by a permanent upstream error keeps the
-- HTTP status the provider answered with, so gateway mode answers the
-- caller with the same status (0: the failure is llmq's own, or the job
-- did not fail).
ALTER TABLE jobs ADD COLUMN error_status integer NOT NULL DEFAULT 0;
