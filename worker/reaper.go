package worker

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmq/llmq/store"
)

// The reaper, on any worker, hands back the jobs whose lease expired (their
// worker died) and expires queued jobs whose deadline passed. The
// statements are idempotent: several workers may sweep at once.

// reapStore holds the sweeps' statements ([JobStore]).
type reapStore interface {
	// ReapExpired hands back jobs whose lease expired (→ queued).
	ReapExpired(ctx context.Context) ([]store.Key, error)
	// ExpireOverdue ends queued jobs whose deadline passed (→ expired).
	ExpireOverdue(ctx context.Context) ([]store.Key, error)
}

// sweeper is a further sweep the reaper runs on each of its ticks.
type sweeper interface {
	sweep(ctx context.Context)
}

// reaperConfig configures a reaper.
type reaperConfig struct {
	Store    reapStore // required
	Interval time.Duration
	// Reaped and Expired count the jobs handed back and expired (nil:
	// not counted); HandedBack is told of jobs handed back (nil: none).
	Reaped, Expired prometheus.Counter
	HandedBack      func()
	// Then are swept after the jobs, in order, on every tick.
	Then  []sweeper
	Clock clockwork.Clock
	Log   *slog.Logger
}

func (c reaperConfig) withDefaults() reaperConfig {
	c.Interval = cmp.Or(max(0, c.Interval), ReapIntervalDefault)
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.Reaped == nil {
		c.Reaped = prometheus.NewCounter(prometheus.CounterOpts{Name: "reaped"})
	}
	if c.Expired == nil {
		c.Expired = prometheus.NewCounter(prometheus.CounterOpts{Name: "expired"})
	}
	if c.HandedBack == nil {
		c.HandedBack = func() {}
	}
	return c
}

func (c reaperConfig) validate() error {
	if c.Store == nil {
		return errors.New("worker: reaper: Store is required")
	}
	return nil
}

// reaper sweeps the job store every Interval.
type reaper struct {
	cfg reaperConfig
}

func newReaper(cfg reaperConfig) (*reaper, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &reaper{cfg: cfg}, nil
}

// Run sweeps every Interval until ctx ends.
func (r *reaper) Run(ctx context.Context) {
	t := r.cfg.Clock.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
		r.sweep(ctx)
	}
}

// sweep runs one sweep: expired leases back to queued, overdue queued
// jobs to expired, then the further sweeps.
func (r *reaper) sweep(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Interval)
	defer cancel()
	if keys, err := r.cfg.Store.ReapExpired(ctx); err != nil {
		r.cfg.Log.Debug("reap expired leases", slog.Any("error", err))
	} else if len(keys) > 0 {
		r.cfg.Reaped.Add(float64(len(keys)))
		r.cfg.Log.Info("jobs whose lease expired handed back", slog.Int("jobs", len(keys)))
		r.cfg.HandedBack()
	}
	if keys, err := r.cfg.Store.ExpireOverdue(ctx); err != nil {
		r.cfg.Log.Debug("expire overdue jobs", slog.Any("error", err))
	} else if len(keys) > 0 {
		r.cfg.Expired.Add(float64(len(keys)))
		r.cfg.Log.Info("queued jobs past their deadline expired", slog.Int("jobs", len(keys)))
	}
	for _, s := range r.cfg.Then {
		s.sweep(ctx)
	}
}
