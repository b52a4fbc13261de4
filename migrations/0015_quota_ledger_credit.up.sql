-- 0015_quota_ledger_credit: what each replica holds and knows of the
-- provider, for the others (docs/design/replicas.md): the credit its
-- buckets hold (requests, tokens), so that a header raises another
-- replica's level only to what none of them holds; and the short bucket
-- it learned from a 429 (its burst; 0 while it knows none), so that the
-- replicas learn the provider's kind once.
ALTER TABLE quota_ledger
    ADD COLUMN credit_requests double precision NOT NULL DEFAULT 0 CHECK (credit_requests >= 0),
    ADD COLUMN credit_tokens   double precision NOT NULL DEFAULT 0 CHECK (credit_tokens >= 0),
    ADD COLUMN short_requests  double precision NOT NULL DEFAULT 0 CHECK (short_requests >= 0),
    ADD COLUMN short_tokens    double precision NOT NULL DEFAULT 0 CHECK (short_tokens >= 0);
