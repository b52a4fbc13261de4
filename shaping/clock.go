package shaping

import (
	"time"

	"github.com/jonboulle/clockwork"
)

// Clock is the time source of the waiting layer ([Lane.Admit], [Bucket.Wait]).
// The algorithms themselves never read a clock: they take the time as an
// argument.
//
// It is the subset of [clockwork.Clock] that the waiting layer uses, so any
// clockwork clock satisfies it: clockwork.NewRealClock() in production (the
// default), clockwork.NewFakeClockAt(t) in tests.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After returns a channel that receives the time once d has elapsed.
	// A d <= 0 fires at once.
	After(d time.Duration) <-chan time.Time
}

// Every clockwork clock is a Clock.
var _ Clock = clockwork.Clock(nil)
