// Package demo runs the whole llmq pipeline in one process for `llmq demo`:
// the upstream simulator with realistic RPM/TPM limits, a little latency
// and a few faults; an embedded Kafka broker (or the broker of
// LLMQ_BROKER); the local Postgres (its demo database created and
// migrated); the worker with its dead-letter writer and Batch API lane; and
// the HTTP API. It enqueues a mixed set of jobs through the API (short and
// long, every priority, some deferrable) plus a few malformed messages
// straight to the broker, shows live progress measured from the
// simulator's own accounting, and ends with a [Summary].
//
// The same run is the package's test, so the figures the newcomer sees are
// checked in CI.
package demo
