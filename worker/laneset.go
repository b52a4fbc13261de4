package worker

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/shaping"
)

// laneScopes are what a lane's dispatcher asks of the tenants' and
// projects' quotas (tenantquota.go): whether a ticket's scopes admit it
// now, the calls they give back, and a channel closed when a scope gives
// back calls or grows.
type laneScopes interface {
	scopeReady(t *ticket) (bool, time.Time)
	releaseScopes(scs []*scopeQuota)
	changed() <-chan struct{}
}

// laneSetConfig configures a laneSet; its fields are Config's of the same
// names, with their defaults.
type laneSetConfig struct {
	Upstream   Upstream // required
	Pools      map[string][]PoolEntry
	Catalog    func() llmq.Catalog
	QuotaScope string
	Strategy   shaping.Strategy
	// AgingStep lifts a waiting job one priority level; FallbackMaxWait
	// is the longest a job with a fallback waits in a lane; LedgerLease
	// and LedgerPeriod bound a wait on share 0.
	AgingStep, FallbackMaxWait, LedgerLease, LedgerPeriod time.Duration
	// Incident* configure each lane's breaker (incident.go).
	IncidentMinCalls     int
	IncidentFailureRatio float64
	IncidentWindow       time.Duration
	IncidentProbeEvery   time.Duration
	Scopes               laneScopes // required
	// BudgetAllows tells whether p's budgets have room for a call of
	// cost (budget.go), for the choice of a pool's entry. Required.
	BudgetAllows func(p *job, cost float64) bool
	// Share is a new lane's share of its quota key (nil: the whole quota,
	// no ledger).
	Share func(ctx context.Context, key string) float64
	// CanaryWanted wakes the claimer: a lane asks for quick jobs up to
	// its staged burst's canary (lane.quickWanted). nil: no claimer to
	// wake.
	CanaryWanted func()
	Metrics      *metrics // required
	Clock        clockwork.Clock
	Log          *slog.Logger
}

func (c laneSetConfig) validate() error {
	if c.Upstream == nil || c.Scopes == nil || c.BudgetAllows == nil || c.Metrics == nil {
		return errors.New("worker: lanes: Upstream, Scopes, BudgetAllows and Metrics are required")
	}
	return nil
}

// laneSet is the worker's lanes, one per model and pool entry, each made
// on first use with a dispatcher of its own (lanes.go), and the pools of
// keys that choose among a model's lanes (pool.go).
type laneSet struct {
	cfg     laneSetConfig
	mu      sync.Mutex
	lanes   map[string]*lane
	unbound map[string]*lane
	// stopCtx ends when Stop begins, workCtx when its grace period ends
	// (the dispatchers stop).
	stopCtx, workCtx context.Context
	running          sync.WaitGroup
}

func newLaneSet(cfg laneSetConfig) (*laneSet, error) {
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Catalog == nil {
		cfg.Catalog = zeroCatalog
	}
	if cfg.CanaryWanted == nil {
		cfg.CanaryWanted = func() {}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &laneSet{cfg: cfg, lanes: map[string]*lane{}, unbound: map[string]*lane{}}, nil
}

// begin sets the contexts of the lanes made from now.
func (ls *laneSet) begin(stop, work context.Context) { ls.stopCtx, ls.workCtx = stop, work }

// wait returns once every dispatcher has ended (the work context ended).
func (ls *laneSet) wait() { ls.running.Wait() }

// get is the lane of name (laneName), if made.
func (ls *laneSet) get(name string) (*lane, bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l, ok := ls.lanes[name]
	return l, ok
}

// all are the lanes made so far, by name.
func (ls *laneSet) all() map[string]*lane {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return maps.Clone(ls.lanes)
}
