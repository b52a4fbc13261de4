package batchapi

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/llmq/llmq/store"
)

// Router sends deferrable jobs to the batch lane (it implements the
// worker's Router). It is safe for concurrent use.
type Router struct {
	st     Store
	policy Policy
	drain  func() time.Duration
	clock  clockwork.Clock
	log    *slog.Logger
	m      *metrics
}

// NewRouter returns the router of cfg (only Store and the routing fields
// are used).
func NewRouter(cfg Config) (*Router, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(false); err != nil {
		return nil, err
	}
	return &Router{st: cfg.Store, policy: cfg.policy(), drain: cfg.Drain, clock: cfg.Clock, log: cfg.Logger,
		m: newMetrics(cfg.Registerer)}, nil
}

// Route takes the claimed job rec to the batch lane when it is deferrable
// and the policy says so; it then returns true and the job is durably
// queued in the batch lane (its message may be acked). A job already in the
// batch lane (a redelivery) is taken again; a job whose lane was already
// decided live (by an earlier delivery or by the batch lane handing it
// back) stays live. A deferrable job routed live records why.
func (r *Router) Route(ctx context.Context, rec *store.JobRecord) (bool, error) {
	if !rec.Deferrable {
		return false, nil
	}
	if rec.Lane == store.LaneBatch {
		return r.toBatch(ctx, rec, "")
	}
	if rec.LaneReason != "" {
		return false, nil
	}
	var drain time.Duration
	if r.drain != nil {
		drain = r.drain()
	}
	d := r.policy.Decide(r.clock.Now(), rec.Deadline, drain)
	if d.Batch {
		return r.toBatch(ctx, rec, d.Reason)
	}
	if err := r.st.SetLane(ctx, rec.ID, store.LaneLive, d.Reason); err != nil {
		return false, fmt.Errorf("batchapi: route %q: %w", rec.ID, err)
	}
	r.m.routed.WithLabelValues(store.LaneLive).Inc()
	return false, nil
}

func (r *Router) toBatch(ctx context.Context, rec *store.JobRecord, reason string) (bool, error) {
	ok, err := r.st.RouteToBatch(ctx, rec.ID, rec.LeaseOwner, reason)
	if err != nil {
		return false, fmt.Errorf("batchapi: route %q: %w", rec.ID, err)
	}
	if ok {
		r.m.routed.WithLabelValues(store.LaneBatch).Inc()
		r.log.Debug("job routed to the batch lane", slog.String("job_id", rec.ID), slog.String("reason", reason))
	}
	return ok, nil
}
