DROP INDEX batches_ingested_idx;
DROP TABLE job_tombstones;
