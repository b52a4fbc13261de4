-- 0024_lane_rates: what each worker's lane of a model runs at (table
-- lane_rates), for the API's prediction of a call's completion: the
-- requests and tokens per minute the lane's limits let through (its share
-- of the provider's quota, known or learned from the provider's headers;
-- 0 = not known yet), its concurrency limit and calls in flight, and the
-- mean latency of its recent calls. A row counts while fresh
-- (store.LaneRateTTL). docs/design/gateway.md.
CREATE TABLE lane_rates (
    model          text             NOT NULL,
    entry          text             NOT NULL DEFAULT '',
    worker         text             NOT NULL,
    requests_per_min double precision NOT NULL DEFAULT 0,
    tokens_per_min double precision NOT NULL DEFAULT 0,
    concurrency    integer          NOT NULL DEFAULT 0,
    in_flight      integer          NOT NULL DEFAULT 0,
    latency_ms     double precision NOT NULL DEFAULT 0,
    updated_at     timestamptz      NOT NULL,
    PRIMARY KEY (model, entry, worker)
);
