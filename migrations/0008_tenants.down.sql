-- 0008_tenants: undo.
DROP TABLE IF EXISTS fair_share;
DROP INDEX IF EXISTS jobs_fair_idx;
ALTER TABLE jobs DROP COLUMN IF EXISTS project;
