// Package worker moves jobs from the broker through Postgres to a
// rate-limited OpenAI-compatible API. Postgres is the queue of record once
// a job is ingested (docs/design/queue-of-record.md):
//
//   - ingest: each message is decoded and validated, its job recorded as
//     queued in batches (a duplicate is a no-op) and the message acked at
//     once; ingestion pauses while Postgres holds Config.IngestWindow queued
//     jobs, so the overflow stays in the broker, unless a tenant holds more
//     than its share of them (its messages past Config.TenantCap are
//     dead-lettered, docs/design/admission.md);
//   - schedule: per model, claim from Postgres (in claim order) only what
//     the model's shaping lane can admit within Config.ClaimHorizon;
//   - run: each claimed job waits for admission in its lane, is marked
//     calling (attempts are counted per job, before each call), is called
//     through an [Upstream], and the reply classified; its result is stored
//     until it lands;
//   - lease: a heartbeat renews every lease the worker holds, every write of
//     a holder is fenced to its lease token, and a reaper hands back the
//     jobs of workers that died and expires overdue queued jobs.
//
// What happens after each step (retry after a delay, fall back to another
// model, dead-letter, fail, succeed, expire) is decided by one pure
// function of the job's state and the step's facts, so the policy is tested
// as a table without any service; docs/worker-policy.md describes it. The
// worker's only dependencies are small interfaces: [JobStore] (Postgres in
// production), [Upstream] ([OpenAIUpstream]), [DeadLetterer], [Router] and
// a transport.Subscriber. Its time is one clockwork.Clock (Config.Clock).
package worker
