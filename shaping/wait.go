package shaping

import (
	"context"
	"time"

	"github.com/jonboulle/clockwork"
)

// sleepUntil waits on clock until t, until wake is closed (a nil wake never
// is), or until ctx ends (returning its cause).
func sleepUntil(ctx context.Context, clock clockwork.Clock, t time.Time, wake <-chan struct{}) error {
	d := t.Sub(clock.Now())
	if d <= 0 {
		return ctx.Err()
	}
	timer := clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.Chan():
		return nil
	case <-wake:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
