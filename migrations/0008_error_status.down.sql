ALTER TABLE jobs DROP COLUMN error_status;
