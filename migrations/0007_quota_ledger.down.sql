-- 0007_quota_ledger: undo.
DROP TABLE IF EXISTS quota_ledger;
