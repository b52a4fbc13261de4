-- 0001_init: drop everything the up migration created.
DROP TABLE IF EXISTS batches;
DROP TABLE IF EXISTS dead_letters;
DROP TABLE IF EXISTS jobs;
