-- 0027_notifications: where a job's result goes besides Postgres, and the
-- outbox of result events (docs/design/notifications.md).
--
-- jobs.reply is the job's route (NULL: none): the reply queue or results
-- topic and correlation id, the headers to echo, the webhook URL. Every
-- statement that ends a job with a route writes its notifications row in
-- the same statement, so a result event is never lost between the commit
-- and its publication; jobs without a route write nothing.
ALTER TABLE jobs ADD COLUMN reply jsonb;

-- A row lives from the job's end to its delivery, when the notifier
-- deletes it; a row that could not be delivered in its retry period stays,
-- dead, until it is replayed. So the table holds the undelivered events
-- only, and an event costs one insert, one claim and one delete: no
-- foreign key and no index besides the key and the due rows (measured in
-- docs/design/notifications.md).
CREATE TABLE notifications (
    -- event_id is the result event's stable id: every delivery of the
    -- row, retries and replays included, carries it (deduplication).
    event_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant text NOT NULL,
    job_id text NOT NULL,
    -- status is the job's terminal status when the row was written.
    status text NOT NULL,
    reply jsonb NOT NULL,
    created_at timestamptz NOT NULL,
    -- retry_since starts the retry period (created_at, or a replay).
    retry_since timestamptz NOT NULL,
    -- next_attempt_at: due from then (a failed delivery pushes it by its
    -- backoff).
    next_attempt_at timestamptz NOT NULL,
    -- claimed_until: a notifier that claims the row holds it until then
    -- (its lease), so one that dies mid-delivery hands the row to another
    -- once the lease passes. Not indexed, so that a claim is a heap-only
    -- update.
    claimed_until timestamptz,
    attempts int NOT NULL DEFAULT 0,
    last_error text NOT NULL DEFAULT '',
    -- dead_at is set when the retry period passed without a delivery
    -- (dead_reason notification_undeliverable); a replay clears it.
    dead_at timestamptz,
    dead_reason text NOT NULL DEFAULT ''
) WITH (fillfactor = 70);

CREATE INDEX notifications_due_idx ON notifications (next_attempt_at) WHERE dead_at IS NULL;
CREATE INDEX notifications_dead_idx ON notifications (tenant, dead_at) WHERE dead_at IS NOT NULL;
