-- 0031_tenant_notifications: a tenant's result route and webhook signing
-- secrets as data, changed at run time (docs/design/notifications.md).
--
-- reply_to is the tenant's results topic or reply queue and webhook its
-- https endpoint, for its jobs that name no route of their own. secrets
-- are its Standard Webhooks signing secrets (whsec_...): the newest first,
-- and while one is rotated the previous one second. The row of tenant '*'
-- holds the secrets of every tenant without a row of its own. A secret is
-- kept as it is (an HMAC needs it), shown once when created, never read
-- back by the admin API. Every change announces itself on
-- llmq_tenant_notifications, and every replica reloads.
CREATE TABLE tenant_notifications (
    tenant     text        PRIMARY KEY,
    reply_to   text        NOT NULL DEFAULT '',
    webhook    text        NOT NULL DEFAULT '',
    secrets    text[]      NOT NULL DEFAULT '{}' CHECK (cardinality(secrets) <= 2),
    version    bigint      NOT NULL DEFAULT 1,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- One row once the configuration's notifications.tenant_replies and
-- webhook_secrets were imported (the first start): after it the database
-- wins.
CREATE TABLE tenant_notifications_imported (
    one         boolean     PRIMARY KEY DEFAULT true CHECK (one),
    imported_at timestamptz NOT NULL
);

CREATE FUNCTION tenant_notifications_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('llmq_tenant_notifications', '');
    RETURN NULL;
END;
$$;

CREATE TRIGGER tenant_notifications_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON tenant_notifications
    FOR EACH STATEMENT EXECUTE FUNCTION tenant_notifications_notify();
