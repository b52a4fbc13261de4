package store

import (
	"errors"
	"fmt"

	"github.com/llmq/llmq"
)

var (
	// errStoreClosed fails operations queued when the store closed.
	errStoreClosed = errors.New("store: closed")
	// ErrNotFound: no job with that id (within that tenant, where one is given).
	ErrNotFound = errors.New("store: job not found")
	// ErrTerminal: the job is in a terminal state and cannot move again.
	ErrTerminal = errors.New("store: job is terminal")
	// ErrLeased: another worker holds an unexpired lease on the job.
	ErrLeased = errors.New("store: job is leased by another worker")
	// ErrBatched: the job is inside a provider batch and not claimable.
	ErrBatched = errors.New("store: job is in a provider batch")
	// ErrIllegalTransition: the job's status does not allow the requested
	// move. Returned wrapped in an *IllegalTransitionError.
	ErrIllegalTransition = errors.New("store: illegal status transition")
	// ErrInvalidJob: the job failed validation or Postgres refused its data
	// (SQLSTATE class 22). Retrying cannot help: dead-letter the message.
	ErrInvalidJob = errors.New("store: invalid job")
	// ErrBadCursor: a List cursor that this store did not produce.
	ErrBadCursor = errors.New("store: bad cursor")
)

// IllegalTransitionError says which move a job refused. It matches
// ErrIllegalTransition, and ErrTerminal when From is terminal.
type IllegalTransitionError struct {
	ID       string
	From, To llmq.Status
}

func (e *IllegalTransitionError) Error() string {
	return fmt.Sprintf("store: job %q: illegal transition %s → %s", e.ID, e.From, e.To)
}

// Is makes errors.Is match ErrIllegalTransition, and ErrTerminal when the job
// is finished.
func (e *IllegalTransitionError) Is(target error) bool {
	return target == ErrIllegalTransition || (target == ErrTerminal && e.From.Terminal())
}
