// Package bench runs `llmq bench`: the design notes' experiments against the
// in-process upstream simulator, with the real worker on the in-memory
// transport and a real Postgres database (created for each run and dropped
// after it), in real time with scaled-down quotas.
//
// Every upstream figure (goodput, quota utilisation, 429s) is measured from
// the simulator's own accounting (its Stats, served as /sim/stats), not
// from llmq's counters; job latencies come from the job rows in Postgres,
// except in the gateway scenario, where the agents time their own calls.
//
// The scenarios:
//
//   - strategies: the comparison of the four client strategies (retry,
//     rpm, shape, adaptive; docs/design/rate-limiting.md) under the same
//     5x overload of a long/short mix, TPM being the binding quota;
//   - burst: the first acceptance experiment of docs/design/quotas.md,
//     the arrival rate raised to 5x its steady value for 10 s;
//   - fallback: its fourth, the primary model's quota exhausted
//     by another client so jobs move to the fallback model;
//   - adaptive: the adaptive strategy with no quota configured, against a
//     limit that halves mid-run: time to converge, with the provider's
//     rate-limit headers and without any;
//   - backlog: 200 jobs landing at once on an idle provider, one worker
//     and three replicas, per-minute and short-bucket enforcement: the
//     share of the physical limit;
//   - gateway: the load test of docs/design/gateway.md, 11 agents making sequential calls
//     with a 60 s timeout to a provider with tight limits, 502s and
//     resets, straight to it and then through the API's gateway mode:
//     failures and the agents' latencies;
//   - sizes: the backlog drained first come, first served and then
//     size-aware (ingest.size_order): short and long jobs' latencies;
//   - room: 180 short questions landing at once on an idle provider whose
//     quota holds them all, per-minute and short-bucket enforcement: the
//     time from the first call to the last result, and the 429s;
//   - enqueue: a steady 50 jobs/s recorded as the API records them, on a
//     provider with room, over the in-memory broker, RabbitMQ and kfake:
//     the time from a job's record to its call;
//   - learn: the backlog with no quota configured, on a short-bucket
//     provider with headers and a minute one without: the 429s;
//   - throughput: llmq's own overhead, single-job POST /v1/jobs by 64
//     callers to an API and worker before an instant simulator.
//
// The long/short mix (the second experiment) is in every scenario;
// the report gives latencies per kind.
//
// [Run] writes report.md and PNG plots (gonum/plot) to Config.Out.
package bench
