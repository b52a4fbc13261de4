-- 0007_quota_ledger: replicas share one provider quota
-- (docs/design/replicas.md).
--
-- One row per live replica and quota key (the provider's base URL, a hash
-- of the API key and the model): the demand the replica has now (requests
-- it holds or could claim), the share of the quota it runs on, and the end
-- of its lease. Every replica renews its rows about twice a second and
-- reads the others'; a row whose lease ended is a replica that died, and
-- its share goes to the others. Rows ended for a minute are deleted by the
-- next renewal.
CREATE TABLE quota_ledger (
    quota_key   text             NOT NULL,
    replica     text             NOT NULL,
    demand      double precision NOT NULL CHECK (demand >= 0),
    share       double precision NOT NULL CHECK (share > 0 AND share <= 1),
    lease_until timestamptz      NOT NULL,
    PRIMARY KEY (quota_key, replica)
);
CREATE INDEX quota_ledger_lease_idx ON quota_ledger (lease_until);
