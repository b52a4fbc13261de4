package dlq

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalidConfig is wrapped by every configuration error; the message names
// the field.
var ErrInvalidConfig = errors.New("dlq: invalid config")

// ErrAlreadyStarted is returned by Start on an alerter that was started
// before.
var ErrAlreadyStarted = errors.New("dlq: already started")

// configError returns an ErrInvalidConfig naming the field.
func configError(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
}

// DeliveryError is a notification a sink answered with a non-2xx status.
type DeliveryError struct {
	// Sink is "alertmanager" or "webhook".
	Sink string
	// StatusCode is the HTTP status of the answer.
	StatusCode int
	// RetryAfter is the receiver's Retry-After, zero when absent.
	RetryAfter time.Duration
	// Body is the start of the answer's body.
	Body string
}

func (e *DeliveryError) Error() string {
	return fmt.Sprintf("dlq: %s answered %d: %s", e.Sink, e.StatusCode, e.Body)
}

// Retryable reports whether the receiver may accept the same notification
// later: 408, 429 and 5xx.
func (e *DeliveryError) Retryable() bool {
	return e.StatusCode == 408 || e.StatusCode == 429 || e.StatusCode >= 500
}

var (
	errNotHTTP = errors.New("scheme is not http or https")
	errNoHost  = errors.New("no host")
)

// ErrNotFound: no dead letter with that id (for that tenant).
var ErrNotFound = errors.New("dlq: dead letter not found")

// ErrEmptyFilter: a purge named no filter; purging every letter needs
// Filter.All.
var ErrEmptyFilter = errors.New("dlq: purge needs an explicit filter")

// ErrNoPublisher: a replay on a Service configured without a Publisher.
var ErrNoPublisher = errors.New("dlq: no publisher configured")

// ErrNotReplayable: the letter's job is not dead-lettered any more (it was
// replayed by other means, or is still being worked on), so a replay would
// run it twice.
var ErrNotReplayable = errors.New("dlq: job is not dead-lettered")
