-- 0027_tenancy: undo.
DROP TABLE IF EXISTS tenancy_audit;
DROP TABLE IF EXISTS tenancy_imported;
DROP TABLE IF EXISTS tenancy_keys;
DROP TABLE IF EXISTS tenancy_projects;
DROP TABLE IF EXISTS tenancy_tenants;
DROP FUNCTION IF EXISTS tenancy_notify();
