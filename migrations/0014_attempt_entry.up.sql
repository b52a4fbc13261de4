-- 0014_attempt_entry: which entry of a model's key pool made each call
-- (docs/design/tenants.md, "Key pools"): the entry's name from the
-- configuration, never its key; '' for a model without a pool and for
-- the calls recorded before.
ALTER TABLE job_attempts ADD COLUMN entry text NOT NULL DEFAULT '';
