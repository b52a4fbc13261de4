package store

import (
	"errors"
	"fmt"

	"github.com/llmq/llmq"
)

var (
	// errStoreClosed fails operations queued when the store closed.
	errStoreClosed = errors.New("store: closed")
	// ErrNotFound: the tenant has no job with that id.
	ErrNotFound = errors.New("store: job not found")
	// ErrTerminal: the job is in a terminal state and cannot move again.
	ErrTerminal = errors.New("store: job is terminal")
	// ErrLeaseLost: the caller's lease is no longer the job's: the job was
	// released, reaped after its lease expired, or claimed again. The
	// caller must leave the job alone.
	ErrLeaseLost = errors.New("store: lease lost")
	// ErrIllegalTransition: the job's status does not allow the requested
	// move. Returned wrapped in an *IllegalTransitionError.
	ErrIllegalTransition = errors.New("store: illegal status transition")
	// ErrInvalidJob: the job failed validation or Postgres refused its data
	// (SQLSTATE class 22 or 54: a NUL in jsonb, a value too large).
	// Retrying cannot help: dead-letter the message, or fail the job when
	// it is its result that cannot be stored. Every other error of an
	// operation (the database unreachable, a timeout) is transient.
	ErrInvalidJob = errors.New("store: invalid job")
	// ErrBadCursor: a List cursor that this store did not produce.
	ErrBadCursor = errors.New("store: bad cursor")
	// ErrNoDatabase: the database of the URL does not exist. Only
	// `llmq migrate` (migrations.Up) creates one, so that a misspelt name
	// cannot start a second, empty queue.
	ErrNoDatabase = errors.New("database does not exist")
)

// NoDatabaseError is Open's error when the URL's database does not exist.
// It matches ErrNoDatabase.
type NoDatabaseError struct{ Database string }

func (e *NoDatabaseError) Error() string {
	return fmt.Sprintf("database %q does not exist: run llmq migrate", e.Database)
}

// Is reports whether target is ErrNoDatabase.
func (e *NoDatabaseError) Is(target error) bool { return target == ErrNoDatabase }

// IllegalTransitionError says which move a job refused. It matches
// ErrIllegalTransition, and ErrTerminal when From is terminal.
type IllegalTransitionError struct {
	Key      Key
	From, To llmq.Status
}

func (e *IllegalTransitionError) Error() string {
	return fmt.Sprintf("store: job %q: illegal transition %s → %s", e.Key.String(), e.From, e.To)
}

// Is makes errors.Is match ErrIllegalTransition, and ErrTerminal when the job
// is finished.
func (e *IllegalTransitionError) Is(target error) bool {
	return target == ErrIllegalTransition || (target == ErrTerminal && e.From.Terminal())
}
