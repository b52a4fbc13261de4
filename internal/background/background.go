// Package background holds the Start/Stop bookkeeping that every llmq part
// with a loop of its own shares (the dead-letter repair, the outbox sweeper,
// the batch lane): one goroutine between Start and Stop, a context that ends
// at Stop or with Start's, and a Stop that waits for the goroutine within a
// deadline and may be called any number of times. Relisten is the loop
// that keeps a listening connection up.
package background

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrStarted is returned by a second Start.
var ErrStarted = errors.New("background: already started")

// Runner runs one function in the background. The zero value is ready to use.
type Runner struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs fn in a new goroutine. fn's context ends when Stop is called or
// when ctx ends; fn should return soon after. A second Start fails with
// ErrStarted.
func (r *Runner) Start(ctx context.Context, fn func(ctx context.Context)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done != nil {
		return ErrStarted
	}
	ctx, r.cancel = context.WithCancel(ctx)
	r.done = make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		fn(ctx)
	}(r.done)
	return nil
}

// Stop ends fn's context and waits for fn to return, or for ctx to end.
// Stopping a runner that was never started, or again, does nothing.
func (r *Runner) Stop(ctx context.Context) error {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.mu.Unlock()
	if done == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("background: stop: %w", ctx.Err())
	}
}
