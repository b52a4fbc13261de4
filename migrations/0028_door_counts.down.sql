-- 0027_door_counts: undo (each API replica keeps its door's limits alone).
DROP TABLE IF EXISTS door_counts;
