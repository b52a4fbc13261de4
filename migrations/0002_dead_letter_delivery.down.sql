-- 0002_dead_letter_delivery: drop what the up migration added.
DROP INDEX IF EXISTS dead_letters_replay_pending_idx;
DROP INDEX IF EXISTS dead_letters_unpublished_idx;
DROP INDEX IF EXISTS dead_letters_created_idx;
ALTER TABLE dead_letters
    DROP CONSTRAINT IF EXISTS dead_letters_letter_key_key,
    DROP COLUMN IF EXISTS replay_published_at,
    DROP COLUMN IF EXISTS message_key,
    DROP COLUMN IF EXISTS model,
    DROP COLUMN IF EXISTS published_at,
    DROP COLUMN IF EXISTS destination,
    DROP COLUMN IF EXISTS letter_key;
