package upstreamsim

import (
	"context"
	"time"

	"github.com/jonboulle/clockwork"
)

// sleep waits d on clock c, or until ctx is done (returning its error).
// clockwork's Sleep cannot be interrupted, so the handlers wait on a timer.
func sleep(ctx context.Context, c clockwork.Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
