-- 0015_quota_ledger_credit: undo.
ALTER TABLE quota_ledger
    DROP COLUMN IF EXISTS credit_requests,
    DROP COLUMN IF EXISTS credit_tokens,
    DROP COLUMN IF EXISTS short_requests,
    DROP COLUMN IF EXISTS short_tokens;
