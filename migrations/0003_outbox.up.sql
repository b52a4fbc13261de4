-- 0003_outbox: the producer's transactional outbox.
-- published_at is when the broker confirmed the job's message. The producer
-- inserts its rows with NULL and sets it after the publish is confirmed; a
-- sweeper republishes queued rows still NULL after a grace period, so a crash
-- between the insert and the publish cannot leave a job queued forever.
-- Rows written any other way (a worker recording a message it consumed, rows
-- older than this migration) were already on the broker: they default to now().
ALTER TABLE jobs ADD COLUMN published_at timestamptz DEFAULT now();

-- The sweeper's scan: queued rows whose publish was never confirmed.
CREATE INDEX jobs_unpublished_idx ON jobs (created_at) WHERE published_at IS NULL AND status = 'queued';
-- The completion rate behind backpressure: jobs finished in the last minutes.
CREATE INDEX jobs_finished_at_idx ON jobs (finished_at) WHERE finished_at IS NOT NULL;
