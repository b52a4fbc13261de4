-- 0011_budgets: undo.
DROP TABLE IF EXISTS budget_reservations;
DROP TABLE IF EXISTS budgets;
