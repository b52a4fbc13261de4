-- 0012_scope_state: tenants and projects held by their own quota
-- (docs/design/tenants.md).
--
-- A worker whose scheduler leaves a tenant's (project '') or a project's
-- queued jobs unclaimed because that scope's rpm, tpm or concurrency is
-- spent writes the scope's row, and rewrites it every second while it
-- holds; a row older than a few seconds is from a scheduler that stopped
-- holding. The status of a queued job of a held scope says tenant_quota.
CREATE TABLE scope_state (
    tenant     text        NOT NULL,
    project    text        NOT NULL,
    worker     text        NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, project)
);
