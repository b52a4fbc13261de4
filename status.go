package llmq

// Status is where a job is in its lifecycle. Terminal states are never left,
// with one exception: a replay of its dead letter moves a dead_lettered job
// back to queued (store.Requeue, an explicit operation outside
// CanTransition).
type Status string

const (
	// StatusQueued: recorded by the producer or the API, waiting in the broker.
	// Moved out by a worker's claim (running), by the batch collector
	// (batched), by a deadline (expired) or by the API (cancelled).
	StatusQueued Status = "queued"
	// StatusRunning: claimed by a worker holding a lease. A worker moves it to
	// succeeded, retrying, failed or dead_lettered. Another worker may claim it
	// again (running → running) once the lease has expired. The batch router
	// takes a deferrable job it has claimed into the batch lane: back to
	// queued for the batch collector, or straight to batched when the job is
	// already reserved for a batch the provider accepted; the collector's
	// submission also moves a reserved job that a duplicate delivery holds
	// for an instant (running → batched).
	StatusRunning Status = "running"
	// StatusRetrying: an attempt failed with a retryable error and the worker
	// waits out its backoff, still holding the lease, before the next attempt
	// (retrying → running); a worker shutting down hands it back (queued).
	StatusRetrying Status = "retrying"
	// StatusBatched: inside a provider Batch API batch. Moved in from queued
	// by the batch collector, or from running by the batch router and the
	// collector (see StatusRunning). The batch poller moves it to succeeded,
	// failed or dead_lettered, or back to queued for the live lane.
	StatusBatched Status = "batched"
	// StatusSucceeded is terminal: the result is stored.
	StatusSucceeded Status = "succeeded"
	// StatusFailed is terminal: a permanent upstream error (400, 401, 404,
	// insufficient_quota).
	StatusFailed Status = "failed"
	// StatusDeadLettered is terminal: retries exhausted or a poison message.
	// It is the one terminal state that can be left, and only by an
	// operator's replay of the dead letter (llmq dlq replay, POST
	// /v1/dead-letters/{id}/replay), which requeues the job with its attempts
	// reset (store.Requeue); CanTransition does not list that move.
	StatusDeadLettered Status = "dead_lettered"
	// StatusExpired is terminal: the deadline passed before the job started.
	StatusExpired Status = "expired"
	// StatusCancelled is terminal: cancelled through the API before it started.
	StatusCancelled Status = "cancelled"
)

// Statuses lists every status in lifecycle order.
var Statuses = []Status{
	StatusQueued, StatusRunning, StatusRetrying, StatusBatched,
	StatusSucceeded, StatusFailed, StatusDeadLettered, StatusExpired, StatusCancelled,
}

// transitions is the legal-transition table: every status change the store
// makes is checked against it (docs/architecture.md lists the operation
// behind each move).
var transitions = map[Status][]Status{
	StatusQueued: {StatusRunning, StatusBatched, StatusExpired, StatusCancelled, StatusDeadLettered},
	// running → batched: the batch router takes a job it has claimed (see
	// StatusRunning).
	StatusRunning:  {StatusRunning, StatusSucceeded, StatusRetrying, StatusFailed, StatusDeadLettered, StatusExpired, StatusQueued, StatusBatched},
	StatusRetrying: {StatusRunning, StatusDeadLettered, StatusExpired, StatusFailed, StatusQueued, StatusSucceeded},
	StatusBatched:  {StatusSucceeded, StatusDeadLettered, StatusQueued, StatusFailed},
}

// Valid reports whether s is one of the defined statuses.
func (s Status) Valid() bool {
	for _, v := range Statuses {
		if s == v {
			return true
		}
	}
	return false
}

// Leased reports whether a job in status s is held by a worker under a
// lease (running, retrying): only the lease holder, or anyone once the lease
// has expired, may move it.
func (s Status) Leased() bool {
	return s == StatusRunning || s == StatusRetrying
}

// Terminal reports whether s is a final state that is never left (except by
// the replay of a dead letter, see StatusDeadLettered).
func (s Status) Terminal() bool {
	switch s {
	case StatusSucceeded, StatusFailed, StatusDeadLettered, StatusExpired, StatusCancelled:
		return true
	}
	return false
}

// CanTransition reports whether a job may move from one status to another.
// running → running is legal: it is a new worker taking over an expired lease.
// running → queued and retrying → queued are legal: a worker that shuts down
// hands its job back. retrying → succeeded is legal: a worker whose lease
// expired mid-call still stores its result after the job's new holder
// marked it retrying (a result is never thrown away).
func CanTransition(from, to Status) bool {
	for _, t := range transitions[from] {
		if t == to {
			return true
		}
	}
	return false
}

// TransitionsFrom returns the statuses a job may move to from s.
func TransitionsFrom(s Status) []Status {
	return append([]Status(nil), transitions[s]...)
}
