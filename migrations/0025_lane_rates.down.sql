-- 0024_lane_rates: undo (the API predicts no completion from the lanes).
DROP TABLE IF EXISTS lane_rates;
