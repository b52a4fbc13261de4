package batchapi

import (
	"fmt"
	"time"
)

// Router decides when deferrable jobs belong to the batch lane. The
// worker's schedulers ask it before each round of claims (the app adapts it
// to worker.Router): while it holds, their claims leave the deferrable
// jobs whose lane is undecided queued in Postgres, where the Collector
// takes them into batches; jobs whose deadline is too near for a batch are
// always claimed live. It is pure and safe for concurrent use.
type Router struct {
	policy Policy
}

// NewRouter returns the router of cfg (only the routing fields are used).
func NewRouter(cfg Config) (*Router, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(false); err != nil {
		return nil, err
	}
	return &Router{policy: cfg.policy()}, nil
}

// Hold is a Router's decision at one instant.
type Hold struct {
	// Batch says undecided deferrable jobs go to the batch lane, except
	// those whose deadline is at or before DeadlineAfter.
	Batch         bool
	DeadlineAfter time.Time
	// LiveReason is the lane reason of a deferrable job the live lane
	// takes meanwhile.
	LiveReason string
}

// Hold decides at now, the live lane draining in drain.
func (r *Router) Hold(now time.Time, drain time.Duration) Hold {
	d := r.policy.Decide(now, nil, drain)
	h := Hold{Batch: d.Batch, DeadlineAfter: now.Add(r.policy.MinDeadlineLead), LiveReason: d.Reason}
	if d.Batch {
		h.LiveReason = fmt.Sprintf("live: deadline within %s, a batch needs more", r.policy.MinDeadlineLead)
	}
	return h
}
