-- 0006_retention: finished jobs, dead letters and ingested batches are
-- deleted after configurable periods (store.Prune). A pruned job leaves a
-- tombstone, its key only, kept longer than the brokers keep messages: a
-- late duplicate of a pruned job's message is not ingested (and paid for)
-- again, because every insert into jobs skips a tombstoned key.
CREATE TABLE job_tombstones (
    tenant    text        NOT NULL,
    id        text        NOT NULL,
    pruned_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX job_tombstones_pruned_idx ON job_tombstones (pruned_at);

-- The prune of dead letters and batches walks them oldest first.
CREATE INDEX batches_ingested_idx ON batches (ingested_at) WHERE ingested_at IS NOT NULL;
