package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Stop budgets of the parts whose Stop does not bound itself.
const (
	// stopTimeout bounds the stop of a background loop (dead-letter
	// repair, alert delivery, outbox sweeper).
	stopTimeout = 10 * time.Second
	// batchStopTimeout bounds the batch lane's stop: a submission or an
	// ingest in progress finishes first.
	batchStopTimeout = 30 * time.Second
	// apiStopTimeout bounds the requests in flight at the API's stop.
	apiStopTimeout = 30 * time.Second
	// metricsStopTimeout bounds the last scrapes.
	metricsStopTimeout = 5 * time.Second
)

// StopWithin calls stop with a context that keeps ctx's values but not its
// cancellation (a stop finishes its final writes even when the process is
// being interrupted) and ends after d; d <= 0 sets no deadline, for a part
// whose Stop bounds itself.
func StopWithin(ctx context.Context, stop func(context.Context) error, d time.Duration) error {
	ctx = context.WithoutCancel(ctx)
	if d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	return stop(ctx)
}

// part is one entry of the App's ordered list: a resource opened by New
// (start is nil) or a component that runs between Start and Stop.
type part struct {
	name    string
	start   func(ctx context.Context) error
	stop    func(ctx context.Context) error
	timeout time.Duration
}

// parts is the ordered list: started first to last, stopped last to first.
type parts struct {
	list    []part
	started int // list[:started] are open or running
}

// opened adds a resource that New has already opened. Resources come
// before every component: they are closed after the components stopped.
func (p *parts) opened(name string, closeFn func(ctx context.Context) error) {
	p.list = append(p.list, part{name: name, stop: closeFn})
	p.started++
}

// add adds a component that Start starts.
func (p *parts) add(name string, start, stop func(ctx context.Context) error, timeout time.Duration) {
	p.list = append(p.list, part{name: name, start: start, stop: stop, timeout: timeout})
}

// startAll starts the components in order; it stops at the first failure
// (the caller stops what started).
func (p *parts) startAll(ctx context.Context) error {
	for p.started < len(p.list) {
		pt := p.list[p.started]
		if pt.start != nil {
			if err := pt.start(ctx); err != nil {
				return fmt.Errorf("app: start %s: %w", pt.name, err)
			}
		}
		p.started++
	}
	return nil
}

// stopAll stops what is open or running, last first, each within its own
// budget, logs each failure and returns them all.
func (p *parts) stopAll(ctx context.Context, log *slog.Logger) error {
	var errs []error
	for i := p.started - 1; i >= 0; i-- {
		pt := p.list[i]
		if err := StopWithin(ctx, pt.stop, pt.timeout); err != nil {
			log.Warn("app: stop", slog.String("part", pt.name), slog.Any("error", err))
			errs = append(errs, fmt.Errorf("app: stop %s: %w", pt.name, err))
		}
	}
	p.started = 0
	return errors.Join(errs...)
}

// closer adapts a Close without a context to the list.
func closer(closeFn func() error) func(context.Context) error {
	return func(context.Context) error { return closeFn() }
}

// quietly adapts a Close without a context or an error to the list.
func quietly(closeFn func()) func(context.Context) error {
	return func(context.Context) error { closeFn(); return nil }
}
