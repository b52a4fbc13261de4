-- 0027_notifications: undo (no result routes, no notifications outbox).
DROP TABLE notifications;
ALTER TABLE jobs DROP COLUMN reply;
