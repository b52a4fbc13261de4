-- 0031_tenant_notifications: undo (tenant routes and secrets from the
-- configuration only).
DROP TABLE IF EXISTS tenant_notifications_imported;
DROP TABLE IF EXISTS tenant_notifications;
DROP FUNCTION IF EXISTS tenant_notifications_notify();
