-- 0012_scope_state: undo.
DROP TABLE IF EXISTS scope_state;
