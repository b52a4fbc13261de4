// Package retention deletes what llmq no longer needs to keep: finished
// jobs and their results, dead letters, ingested batches, and at last the
// tombstones of pruned jobs (store.Prune), on a timer, in short statements
// that never hold long locks. Every worker process runs a Pruner; several
// at once share the work (each skips the rows another holds).
//
// A pruned job leaves a tombstone, its key only, kept longer than any broker
// keeps a message (Tombstones, 30 days by default against Kafka's 7-day
// default retention): a late duplicate of the job's message finds the
// tombstone and is not ingested, so it is never called and paid for again.
//
// On a timer of its own, every few seconds, a Pruner also folds the rows
// that finishing jobs add to the usage (store.FoldUsage), so that a read of
// the usage sums a few rows per scope.
package retention
