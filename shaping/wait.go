package shaping

import (
	"context"
	"time"

	"github.com/jonboulle/clockwork"
)

// sleepUntil waits on clock until t, or until ctx ends (returning its cause).
func sleepUntil(ctx context.Context, clock clockwork.Clock, t time.Time) error {
	d := t.Sub(clock.Now())
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-clock.After(d):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
