DROP INDEX IF EXISTS jobs_finished_at_idx;
DROP INDEX IF EXISTS jobs_unpublished_idx;
ALTER TABLE jobs DROP COLUMN IF EXISTS published_at;
