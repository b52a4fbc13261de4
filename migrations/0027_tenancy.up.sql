-- 0027_tenancy: tenants, projects and API keys as data, changed at run time
-- (docs/design/tenants.md#tenants-as-data).
--
-- A tenant's and a project's settings are the JSON of llmq.Scope (weight,
-- priority, rpm, tpm, concurrency, budgets, overage, paused ...). Every
-- row has a version, raised by each update: the admin API's ETag. Every
-- statement that changes these tables announces it on llmq_tenancy when
-- it commits, and every worker and API replica reloads its snapshot.
CREATE TABLE tenancy_tenants (
    name                   text        PRIMARY KEY,
    scope                  jsonb       NOT NULL DEFAULT '{}',
    allow_unknown_projects boolean     NOT NULL DEFAULT false,
    version                bigint      NOT NULL DEFAULT 1,
    updated_at             timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE tenancy_projects (
    tenant     text        NOT NULL REFERENCES tenancy_tenants (name) ON DELETE CASCADE,
    name       text        NOT NULL,
    scope      jsonb       NOT NULL DEFAULT '{}',
    version    bigint      NOT NULL DEFAULT 1,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, name)
);

-- An API key of a tenant: only its SHA-256 is kept; the key itself is
-- shown once, when it is created.
CREATE TABLE tenancy_keys (
    name         text        PRIMARY KEY,
    tenant       text        NOT NULL REFERENCES tenancy_tenants (name) ON DELETE CASCADE,
    hash         bytea       NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,
    last_used_at timestamptz,
    revoked_at   timestamptz,
    version      bigint      NOT NULL DEFAULT 1
);

-- One row once the configuration's tenants and keys were imported (the
-- first start): after it the database wins.
CREATE TABLE tenancy_imported (
    one         boolean     PRIMARY KEY DEFAULT true CHECK (one),
    imported_at timestamptz NOT NULL
);

-- Who changed what, when, from which value to which; deleted by retention.
CREATE TABLE tenancy_audit (
    id     bigserial   PRIMARY KEY,
    at     timestamptz NOT NULL,
    actor  text        NOT NULL,
    action text        NOT NULL,
    kind   text        NOT NULL,
    name   text        NOT NULL,
    old    jsonb,
    new    jsonb
);
CREATE INDEX tenancy_audit_at_idx ON tenancy_audit (at);

CREATE FUNCTION tenancy_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('llmq_tenancy', TG_TABLE_NAME);
    RETURN NULL;
END;
$$;

-- last_used_at alone changes nothing a replica serves: it does not notify.
CREATE TRIGGER tenancy_tenants_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON tenancy_tenants
    FOR EACH STATEMENT EXECUTE FUNCTION tenancy_notify();
CREATE TRIGGER tenancy_projects_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON tenancy_projects
    FOR EACH STATEMENT EXECUTE FUNCTION tenancy_notify();
CREATE TRIGGER tenancy_keys_notify AFTER INSERT OR DELETE OR TRUNCATE ON tenancy_keys
    FOR EACH STATEMENT EXECUTE FUNCTION tenancy_notify();
CREATE TRIGGER tenancy_keys_update_notify AFTER UPDATE OF hash, tenant, expires_at, revoked_at, version ON tenancy_keys
    FOR EACH STATEMENT EXECUTE FUNCTION tenancy_notify();
