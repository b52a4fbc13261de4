-- 0030_model_limits: the models' limits, context windows, prices and
-- fallbacks as data, changed at run time like the tenants of 0027
-- (docs/design/tenants.md#models-as-data).
--
-- A row's model is the JSON of llmq.Model. Every statement that changes the
-- table announces it on llmq_tenancy, and every replica reloads.
CREATE TABLE tenancy_models (
    name       text        PRIMARY KEY,
    model      jsonb       NOT NULL DEFAULT '{}',
    version    bigint      NOT NULL DEFAULT 1,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- One row once the configuration's models were imported (the first start
-- after this migration): after it the database wins.
CREATE TABLE tenancy_models_imported (
    one         boolean     PRIMARY KEY DEFAULT true CHECK (one),
    imported_at timestamptz NOT NULL
);

CREATE TRIGGER tenancy_models_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON tenancy_models
    FOR EACH STATEMENT EXECUTE FUNCTION tenancy_notify();
