package store

import (
	"fmt"
	"strings"

	"github.com/llmq/llmq"
)

// A transition is one kind of status change a store operation makes: a job
// in one of the statuses From moves to To. Each declaration below is checked
// against [llmq.CanTransition] at load (a forbidden move panics), and
// statements splice in its SQL text rendered once, so they never spell a
// status (docs/design/queue-of-record.md#transition). Rows are created
// queued (Insert, Ingest, InsertOutbox); that is not a transition.
type transition struct {
	// Op names the store operation (a test runs each one against every
	// status).
	Op string
	// To is the status the operation moves a job to.
	To llmq.Status
	// From are the statuses it moves a job from: every status from which
	// llmq.CanTransition allows To, unless the operation is narrower and
	// names them.
	From []llmq.Status
	// Replay marks the one exit from a terminal state, dead_lettered →
	// queued by an operator's replay, which llmq.CanTransition does not
	// list (see llmq.StatusDeadLettered).
	Replay bool

	to string // To as an SQL literal: 'running'
	in string // From as an SQL list: IN ('queued', 'retrying')
}

// transitions lists every declared transition, in declaration order.
var transitions []*transition

// declare records the transition op makes to to, from the statuses from
// (none: every status CanTransition allows). It panics when the table
// forbids one of them, or allows none.
func declare(op string, to llmq.Status, from ...llmq.Status) *transition {
	if len(from) == 0 {
		for _, f := range llmq.Statuses {
			if llmq.CanTransition(f, to) {
				from = append(from, f)
			}
		}
	}
	if len(from) == 0 {
		panic(fmt.Sprintf("store: %s: no status may move to %s", op, to))
	}
	for _, f := range from {
		if !llmq.CanTransition(f, to) {
			panic(fmt.Sprintf("store: %s: %s → %s is not a legal transition", op, f, to))
		}
	}
	return register(&transition{Op: op, To: to, From: from})
}

func register(t *transition) *transition {
	t.to, t.in = literal(t.To), sqlIn(t.From...)
	transitions = append(transitions, t)
	return t
}

// literal renders a status as an SQL string literal. Statuses are lower
// case words (the CHECK constraint of jobs.status lists them); anything
// else panics rather than reach a statement.
func literal(s llmq.Status) string {
	for _, r := range s {
		if (r < 'a' || r > 'z') && r != '_' {
			panic(fmt.Sprintf("store: status %q cannot be spliced into SQL", s))
		}
	}
	return "'" + string(s) + "'"
}

// sqlIn renders statuses as an SQL list: IN ('a', 'b').
func sqlIn(ss ...llmq.Status) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = literal(s)
	}
	return "IN (" + strings.Join(q, ", ") + ")"
}

// The store's transitions. Where an operation names its from-statuses, it
// makes only some of the moves the table allows.
var (
	// Claim takes queued jobs only: a job whose holder died is reaped back
	// to queued first (ReapExpired).
	tClaim = declare("Claim", llmq.StatusRunning, llmq.StatusQueued)
	// The holder's moves (fenced to its lease token).
	tMarkCalling  = declare("MarkCalling", llmq.StatusRunning, llmq.StatusRunning, llmq.StatusRetrying)
	tMarkRetrying = declare("MarkRetrying", llmq.StatusRetrying, llmq.StatusRunning)
	tRelease      = declare("Release", llmq.StatusQueued, llmq.StatusRunning, llmq.StatusRetrying)
	tMarkFailed   = declare("MarkFailed", llmq.StatusFailed, llmq.StatusRunning, llmq.StatusRetrying)
	tMarkExpired  = declare("MarkExpired", llmq.StatusExpired, llmq.StatusRunning, llmq.StatusRetrying)
	tDeadLetter   = declare("RecordDeadLetter (held)", llmq.StatusDeadLettered, llmq.StatusRunning, llmq.StatusRetrying)
	// StoreResult is accepted whatever the lease (a paid answer counts,
	// even from a holder whose lease lapsed and was reaped), never over a
	// terminal state.
	tStoreResult = declare("StoreResult", llmq.StatusSucceeded)
	// ReapExpired hands back the jobs whose holder stopped renewing.
	tReapExpired = declare("ReapExpired", llmq.StatusQueued, llmq.StatusRunning, llmq.StatusRetrying)
	// MarkDeadLettered ends a job nobody holds (a message the broker gave
	// up on, an unpublishable outbox row); a held job is dead-lettered by
	// its holder through RecordDeadLetter.
	tMarkDeadLettered = declare("MarkDeadLettered", llmq.StatusDeadLettered, llmq.StatusQueued)
	// ExpireOverdue sweeps queued jobs; a job a worker holds is expired by
	// that worker.
	tExpireOverdue      = declare("ExpireOverdue", llmq.StatusExpired, llmq.StatusQueued)
	tCancel             = declare("Cancel", llmq.StatusCancelled)
	tMarkBatchSubmitted = declare("MarkBatchSubmitted", llmq.StatusBatched, llmq.StatusQueued)
	// IngestBatch and PullBack act on the jobs inside a batch only.
	tIngestResult     = declare("IngestBatch (result)", llmq.StatusSucceeded, llmq.StatusBatched)
	tIngestLive       = declare("IngestBatch (live)", llmq.StatusQueued, llmq.StatusBatched)
	tIngestDeadLetter = declare("IngestBatch (dead letter)", llmq.StatusDeadLettered, llmq.StatusBatched)
	tPullBack         = declare("PullBack", llmq.StatusQueued, llmq.StatusBatched)
	tRequeue          = register(&transition{Op: "Requeue", To: llmq.StatusQueued,
		From: []llmq.Status{llmq.StatusDeadLettered}, Replay: true})
)

// keyed is the test of t's from-statuses on column col of a statement that
// finds one job by key (tenant, id): (col IN (...)) IS TRUE, which the
// planner cannot make an index condition, so the key finds the row through
// jobs_pkey. Not for the merged statements over arrays
// (docs/design/queue-of-record.md#keyed).
func (t *transition) keyed(col string) string { return "(" + col + " " + t.in + ") IS TRUE" }

// leasedIn lists the statuses in which a worker holds a job under a lease
// (llmq.Status.Leased) as an SQL list: IN ('running', 'retrying').
var leasedIn = func() string {
	var ss []llmq.Status
	for _, s := range llmq.Statuses {
		if s.Leased() {
			ss = append(ss, s)
		}
	}
	return sqlIn(ss...)
}()
