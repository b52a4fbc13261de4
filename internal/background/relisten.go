package background

import (
	"context"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/llmq/llmq/internal/backoff"
)

// Relisten keeps a listening connection (a Postgres LISTEN session) up
// until ctx ends. listen runs one session: it calls listening once it
// listens, and returns when the session fails. After the nth failure in a
// row Relisten tells failed the error and the wait, policy.Exp(n), then
// waits on clock and listens again; a session that listened starts the
// count again.
func Relisten(ctx context.Context, clock clockwork.Clock, policy backoff.Policy,
	listen func(ctx context.Context, listening func()) error, failed func(err error, wait time.Duration)) {
	fails := 0
	for {
		heard := false
		err := listen(ctx, func() { heard = true })
		if ctx.Err() != nil {
			return
		}
		if heard {
			fails = 0
		}
		wait := policy.Exp(fails)
		failed(err, wait)
		select {
		case <-clock.After(wait):
		case <-ctx.Done():
			return
		}
		fails++
	}
}
