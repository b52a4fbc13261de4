// Package store is llmq's Postgres access: a pgx pool and the job
// operations the worker, the HTTP API, the dead-letter handler and the batch
// adapter share. Postgres is the queue of record: jobs are recorded
// (Ingest, Insert, InsertOutbox), claimed in one order (Claim), held under
// a renewed, fenced lease (Heartbeat, MarkCalling, MarkRetrying, Release,
// the terminal writes), reaped when their holder dies (ReapExpired), and
// their results stored once (StoreResult). Jobs are keyed by (tenant, id).
//
// The operations are grouped by aggregate, each a type of its own reached
// from the Store by a method of the aggregate's name: [Store.Queue] (jobs
// and their claims, the worker's), [Store.Jobs] (a job's reads and the
// counts, the API's), [Store.DeadLetters], [Store.Batches],
// [Store.Budgets] (and usage), [Store.Ledger] (quota ledger, door counts),
// [Store.Outbox] (the producer's), [Store.LaneRates], [Store.Streams],
// [Store.Notifications] and [Store.Tenancy]. Each consumer declares the
// few methods it uses of one aggregate and is handed that aggregate, so
// no consumer sees the Store. The aggregates share one unexported base
// (pool, clock, claim order, group committer); all but Notifications and
// Tenancy are fields of the Store, so reaching one allocates nothing. The
// Store itself opens, migrates, prunes and closes.
//
// Every state change is one conditional UPDATE whose WHERE clause lists the
// source states of one declared transition (transition.go), plus the lease
// token where a worker acts on a job it holds, so two processes can never
// both move a job, a stale holder changes nothing, and a terminal job is
// never left. Each declaration is checked against [llmq.CanTransition] when
// the package loads, and a test runs every operation on every status
// against that table. When the UPDATE matches no row the store reads the
// row once to say why: [ErrNotFound], [ErrLeaseLost], or an
// [*IllegalTransitionError] (which also matches [ErrTerminal] when the job
// is finished).
//
// Times (created, started, finished, lease expiry, the claim order's key)
// come from the injected clock ([WithClock]), so leases are testable
// without sleeping; every process sharing a database should have a
// synchronised clock.
package store
