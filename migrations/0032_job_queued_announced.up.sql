-- 0032_job_queued_announced: the models of newly queued jobs are announced
-- on llmq_job_queued by the process that recorded them, after its commit
-- (store/announce.go), no longer by a trigger in the recording
-- transaction: a transaction that notifies takes, at its commit, a lock
-- that every notifying transaction of the server takes, held through
-- its WAL flush, and the API's commits waited on each other's
-- (docs/design/queue-of-record.md, "Waking the claims").
DROP TRIGGER jobs_queued_notify ON jobs;
DROP FUNCTION job_queued_notify();
