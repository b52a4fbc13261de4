-- 0033_notification_batches: the result events of one statement that ends
-- jobs with a route are written as one row (docs/design/notifications.md,
-- Cost): the insert, the claim and the delete are paid once for the tens
-- of jobs a statement of the group committer ends, not once per job.
--
-- A batch lives until the round that claimed it settles it: its delivered
-- events leave with it, and each event whose delivery failed moves to
-- notifications with its event id, in the same transaction, and is
-- retried there. A notifier that dies before it settles hands the batch
-- on when its lease (claimed_until) passes; the events are sent again with
-- the same ids.
CREATE TABLE notification_batches (
    id bigserial PRIMARY KEY,
    -- created_at is when the statement ended the jobs; the events are due
    -- from then.
    created_at timestamptz NOT NULL,
    claimed_until timestamptz,
    attempts int NOT NULL DEFAULT 0,
    -- One element per event, in the same order in every array.
    event_ids uuid[] NOT NULL,
    tenants text[] NOT NULL,
    job_ids text[] NOT NULL,
    statuses text[] NOT NULL,
    replies jsonb[] NOT NULL
) WITH (fillfactor = 70);
