-- 0002_dead_letter_delivery: what the dead-letter writer and replay need.
--
-- letter_key makes recording idempotent under redelivery: "job:<id>:<n>" for
-- a job, "msg:<sha256 of key and body>:<n>" for a poison message without an
-- id, where n counts the earlier letters of the same job or message that were
-- replayed (a job dead-lettered again after a replay is a new letter).
-- published_at stays NULL until the DLQ publish is confirmed (the repair
-- sweep republishes rows left NULL); replay_published_at likewise for the
-- republish of a replay begun at replayed_at.

ALTER TABLE dead_letters
    ADD COLUMN letter_key          text,
    ADD COLUMN destination         text        NOT NULL DEFAULT '',
    ADD COLUMN published_at        timestamptz,
    ADD COLUMN model               text        NOT NULL DEFAULT '',
    ADD COLUMN message_key         bytea       NOT NULL DEFAULT '\x'::bytea,
    ADD COLUMN replay_published_at timestamptz;

UPDATE dead_letters SET letter_key = 'legacy:' || id, published_at = created_at;

ALTER TABLE dead_letters
    ALTER COLUMN letter_key SET NOT NULL,
    ADD CONSTRAINT dead_letters_letter_key_key UNIQUE (letter_key);

-- Listing all letters newest first (llmq dlq ls without --tenant).
CREATE INDEX dead_letters_created_idx ON dead_letters (created_at, id);
-- The repair sweeps: unconfirmed DLQ publishes and unfinished replays.
CREATE INDEX dead_letters_unpublished_idx ON dead_letters (created_at, id) WHERE published_at IS NULL;
CREATE INDEX dead_letters_replay_pending_idx ON dead_letters (replayed_at, id)
    WHERE replayed_at IS NOT NULL AND replay_published_at IS NULL;
