package worker

import (
	"context"
)

// service is one of the worker's background loops: Run returns soon after
// ctx ends. Each is a type of its own with its own configuration (lease.go,
// reaper.go); the worker makes them in New and starts them, in the order
// of Worker.services, when it starts; they stop once every job has left.
type service interface {
	Run(ctx context.Context)
}

// sweepFunc is a sweep made of a function.
type sweepFunc func(ctx context.Context)

func (f sweepFunc) sweep(ctx context.Context) { f(ctx) }

// newServices makes the worker's background services from its
// configuration.
func (w *Worker) newServices() error {
	var err error
	w.leases, err = newHeartbeat(heartbeatConfig{Store: w.cfg.Store, Owner: w.cfg.Owner, Lease: w.cfg.Lease,
		Interval: w.cfg.HeartbeatInterval, Clock: w.cfg.Clock, Log: w.log})
	if err != nil {
		return err
	}
	reap, err := newReaper(reaperConfig{Store: w.cfg.Store, Interval: w.cfg.ReapInterval,
		Reaped: w.metrics.reaped, Expired: w.metrics.jobs.WithLabelValues("expired"), HandedBack: w.poke,
		Then: []sweeper{sweepFunc(w.reapBudgets)}, Clock: w.cfg.Clock, Log: w.log})
	if err != nil {
		return err
	}
	w.services = []service{w.leases, reap}
	return nil
}

// startServices starts the services in order; they run until ctx ends.
func (w *Worker) startServices(ctx context.Context) {
	for _, s := range w.services {
		w.background.Add(1)
		go func() {
			defer w.background.Done()
			s.Run(ctx)
		}()
	}
}
