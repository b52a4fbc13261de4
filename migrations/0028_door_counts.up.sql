-- 0027_door_counts: API replicas behind one address share the limits at
-- their door (docs/design/scale.md#api-replicas-behind-one-address). One
-- row per limit (an API key's or a tenant's requests per minute) and live
-- replica: the requests the replica let through since it started and in
-- its last minute, and the end of its lease. Every replica rewrites its
-- rows twice a second and reads the others', and takes their new requests
-- from its own buckets. Unlogged: a row is rewritten within a second.
CREATE UNLOGGED TABLE door_counts (
    name        text             NOT NULL,
    replica     text             NOT NULL,
    taken       bigint           NOT NULL CHECK (taken >= 0),
    last_minute double precision NOT NULL CHECK (last_minute >= 0),
    lease_until timestamptz      NOT NULL,
    PRIMARY KEY (name, replica)
);
CREATE INDEX door_counts_lease_idx ON door_counts (lease_until);
