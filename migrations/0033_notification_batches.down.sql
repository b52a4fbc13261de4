-- 0033_notification_batches: undo (one notifications row per event); the
-- events of the batches not yet delivered move to notifications with their
-- ids.
INSERT INTO notifications (event_id, tenant, job_id, status, reply, created_at, retry_since, next_attempt_at, attempts)
SELECT e.event_id, e.tenant, e.job_id, e.status, e.reply, b.created_at, b.created_at, b.created_at, b.attempts
FROM notification_batches b, unnest(b.event_ids, b.tenants, b.job_ids, b.statuses, b.replies)
    AS e(event_id, tenant, job_id, status, reply);
DROP TABLE notification_batches;
