package shaping

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrTooLarge is permanent: the request needs more tokens than a bucket
	// can ever hold, so no wait would admit it.
	ErrTooLarge = errors.New("shaping: request larger than bucket capacity")
	// ErrInvalidConfig wraps every configuration error; the message names
	// the field.
	ErrInvalidConfig = errors.New("shaping: invalid config")
	// ErrUnknownStrategy is returned by [ParseStrategy].
	ErrUnknownStrategy = errors.New("shaping: unknown strategy")
	// ErrPermitDone is returned by [Permit.Done] when called twice.
	ErrPermitDone = errors.New("shaping: permit already done")
)

// WaitError reports that admission would have to wait past the context's
// deadline (or the time given to [Lane.AdmitBy]). Nothing is reserved when it is returned. Wait is the predicted
// wait, suitable for a Retry-After.
type WaitError struct {
	// Wait is how long admission would take from the time of the call.
	Wait time.Duration
	// Deadline is the context's deadline, or AdmitBy's by when earlier.
	Deadline time.Time
}

func (e *WaitError) Error() string {
	return fmt.Sprintf("shaping: predicted wait %v passes the deadline %v", e.Wait, e.Deadline.Format(time.RFC3339Nano))
}

// RetryAfter returns the predicted wait, for the Retry-After header.
func (e *WaitError) RetryAfter() time.Duration { return e.Wait }
