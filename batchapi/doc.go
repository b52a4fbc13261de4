// Package batchapi moves deferrable jobs to the provider's Batch API and
// brings their results home.
//
// Four parts share one [Config]:
//
//   - [Router]: the routing policy the worker's schedulers ask before they
//     claim. A deferrable job whose deadline leaves room for a 24h batch
//     belongs to the batch lane inside the off-peak window, or when the
//     live lane's predicted drain time passes a threshold; while that
//     holds, the live lane's claims leave such jobs queued in Postgres
//     (their waiting reason is batch). A deferrable job the live lane takes
//     records why (jobs.lane_reason).
//   - [Collector]: takes the pending jobs of each model (queued, lane
//     batch or undecided while the policy says batch), in the order they
//     were recorded, into JSONL input files (custom_id = the job's key, tenant/id; at most MaxLines lines
//     and MaxBytes bytes), uploads them (purpose batch) and creates the
//     batches. A batch is recorded as submitting, with its jobs reserved
//     (queued, lane batch), before anything is sent; on restart a
//     submitting batch is looked up at the provider by its metadata
//     (llmq_batch_id) before it is submitted again, so no job is submitted
//     twice. Jobs move to batched when the provider accepted their batch.
//   - [Poller]: follows every open batch; once final it downloads the
//     output and error files and, in one transaction, stores each result on
//     its job (only while the job is batched in that batch: exactly once),
//     sends failed, expired, cancelled and missing lines back to the live
//     lane (queued in Postgres, where the schedulers claim them) or to dead
//     letters per FailedLinePolicy, and records the batch's cost against
//     live prices. Dead letters are published through an outbox table, so
//     a crash between the state change and the publish loses none. Jobs
//     whose deadline comes near are pulled back to the live lane; their
//     batch is left running.
//   - [Service]: runs collector and poller on a timer (Start/Stop).
//
// Cost: each result stores its price at batch rates (the model's price
// times its batch discount, 0.5 by default) and each batch the live price of
// the same tokens; [CostReport] sums the saving.
package batchapi
