package llmq

// Status is where a job is in its lifecycle. Terminal states are never left,
// with one exception: a replay of its dead letter moves a dead_lettered job
// back to queued (store.Requeue, an explicit operation outside
// CanTransition).
type Status string

const (
	// StatusQueued: recorded (by a worker's ingest, the producer or the
	// API) and waiting in Postgres for its turn. Moved out by a worker's
	// claim (running), by the batch lane's submission (batched), by a
	// deadline (expired), by the API (cancelled), by a dead letter of its
	// message (dead_lettered), or by the result of a call whose holder's
	// lease had lapsed (succeeded: a paid answer is never thrown away).
	StatusQueued Status = "queued"
	// StatusRunning: claimed by a worker holding a lease, which it renews
	// while the job waits for admission, calls or backs off (the job's
	// phase says which). The holder moves it to succeeded, retrying,
	// failed, dead_lettered or expired, or hands it back (queued); a job
	// whose lease expired is reaped back to queued. running → running is
	// the holder starting a call.
	StatusRunning Status = "running"
	// StatusRetrying: an attempt failed with a retryable error and the
	// holder waits out its backoff, still holding (and renewing) the lease,
	// before the next call (retrying → running); it is handed back or
	// reaped like a running job (queued).
	StatusRetrying Status = "retrying"
	// StatusBatched: inside a provider Batch API batch. Moved in from
	// queued when the batch lane's submission is accepted. The batch poller
	// moves it to succeeded or dead_lettered, or back to queued for the
	// live lane.
	StatusBatched Status = "batched"
	// StatusSucceeded is terminal: the result is stored.
	StatusSucceeded Status = "succeeded"
	// StatusFailed is terminal: a permanent upstream error (400, 401, 404,
	// insufficient_quota), or a result Postgres cannot store.
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
	// queued → succeeded: the answer of a call whose holder's lease lapsed
	// and was reaped (see StatusQueued).
	StatusQueued:   {StatusRunning, StatusBatched, StatusExpired, StatusCancelled, StatusDeadLettered, StatusSucceeded},
	StatusRunning:  {StatusRunning, StatusSucceeded, StatusRetrying, StatusFailed, StatusDeadLettered, StatusExpired, StatusQueued},
	StatusRetrying: {StatusRunning, StatusDeadLettered, StatusExpired, StatusFailed, StatusQueued, StatusSucceeded},
	StatusBatched:  {StatusSucceeded, StatusDeadLettered, StatusQueued},
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
// running → running is legal: the holder begins a call. running → queued
// and retrying → queued are legal: a worker that shuts down hands its job
// back, and the reaper hands back a job whose lease expired. retrying →
// succeeded and queued → succeeded are legal: a worker whose lease expired
// mid-call still stores its result after the job was reaped or claimed
// again (a result is never thrown away).
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
