package worker

import (
	"context"

	"github.com/llmq/llmq/store"
)

// service is one of the worker's background loops: Run returns soon after
// ctx ends. Each is a type of its own with its own configuration and lock
// (lease.go, reaper.go, observe.go, ledger.go, queued.go). The worker
// makes them in New and starts them in the order of Worker.services; Stop
// ends them all once every job has left, and waits for them.
type service interface {
	Run(ctx context.Context)
}

// newServices makes the worker's parts from its configuration: the
// scopes and the lanes, the claimer (which the other parts wake), the
// ingester, the heartbeat, the caller and its budget gate, then the
// background loops. Some are told of others made later by funcs that
// read them when called, after New.
func (w *Worker) newServices() error {
	cfg := w.cfg
	if err := w.newLanes(); err != nil {
		return err
	}
	var err error
	w.claims, err = newClaimer(claimerConfig{Store: cfg.Store, Lanes: w.lanes, Scopes: w.scopes, Holds: &w.holds, Owner: cfg.Owner,
		Lease: cfg.Lease, Catalog: w.catalog, MaxInFlight: cfg.MaxInFlight, ClaimHorizon: cfg.ClaimHorizon,
		FallbackMaxWait: cfg.FallbackMaxWait, FallbackOn: cfg.FallbackOn, Router: cfg.Router, Drain: w.Drain,
		Held:    func() int64 { return w.calls.inFlight.Load() },
		Claimed: func(recs []*store.JobRecord) { w.ingest.claimed(recs) },
		Start:   func(rec *store.JobRecord, at claimTimes) { w.calls.start(rec, at) }, Clock: cfg.Clock, Log: w.log})
	if err != nil {
		return err
	}
	w.ingest, err = newIngester(ingesterConfig{Store: cfg.Store, DeadLetters: cfg.DeadLetters, Tenants: w.tenantsNow,
		Catalog: w.catalog, Sizer: w.sizer, TenantReplies: cfg.TenantReplies, ResultsTopic: cfg.ResultsTopic,
		MaxMessageBytes: cfg.MaxMessageBytes, Window: cfg.IngestWindow, TenantCap: cfg.TenantCap,
		Batch: cfg.IngestBatch, Prefetch: cfg.IngestPrefetch, Recorded: w.claims.learnModel,
		Wake:    func() { w.claims.pokeBy(wokenByIngest) },
		Metrics: w.metrics, Clock: cfg.Clock, Log: w.log})
	if err != nil {
		return err
	}
	w.leases, err = newHeartbeat(heartbeatConfig{Store: cfg.Store, Owner: cfg.Owner, Lease: cfg.Lease,
		Interval: cfg.HeartbeatInterval, Clock: cfg.Clock, Log: w.log})
	if err != nil {
		return err
	}
	if err := w.newCalls(); err != nil {
		return err
	}
	return w.newBackground()
}

// newLanes makes the scopes and the lanes, which take their shares of
// the quotas from the ledger when there is one.
func (w *Worker) newLanes() error {
	cfg := w.cfg
	var share func(ctx context.Context, key string) float64
	var scopeShare func(key string) float64
	if cfg.Ledger != nil {
		share = func(ctx context.Context, key string) float64 { return w.ledger.startShare(ctx, key) }
		scopeShare = func(key string) float64 { return w.ledger.startShare(w.stopCtx, key) }
	}
	var err error
	w.scopes, err = newScopes(scopesConfig{Tenants: w.tenantsNow, ClaimHorizon: cfg.ClaimHorizon, Share: scopeShare,
		Metrics: w.scopeMetrics, Clock: cfg.Clock})
	if err != nil {
		return err
	}
	w.lanes, err = newLaneSet(laneSetConfig{Upstream: cfg.Upstream, Pools: cfg.Pools, Catalog: w.catalog,
		QuotaScope: cfg.QuotaScope, Strategy: cfg.Strategy, AgingStep: cfg.AgingStep, FallbackMaxWait: cfg.FallbackMaxWait,
		LedgerLease: cfg.LedgerLease, LedgerPeriod: cfg.LedgerPeriod, IncidentMinCalls: cfg.IncidentMinCalls,
		IncidentFailureRatio: cfg.IncidentFailureRatio, IncidentWindow: cfg.IncidentWindow,
		IncidentProbeEvery: cfg.IncidentProbeEvery, Scopes: w.scopes, Share: share, Metrics: w.metrics,
		CanaryWanted: func() { w.claims.pokeBy(wokenByOther) },
		BudgetAllows: func(p *job, cost float64) bool { return w.gate.allows(p, cost) }, Clock: cfg.Clock, Log: w.log})
	return err
}

// newBackground makes the background services, in the order they start.
func (w *Worker) newBackground() error {
	cfg, wake := w.cfg, w.claims.poke
	var err error
	var then []sweeper
	if cfg.Budgets != nil && (cfg.LiveTenants != nil || cfg.Tenants.HasBudgets()) {
		w.budgets, err = newBudgetSweep(budgetSweepConfig{Store: cfg.Budgets, Metrics: w.budgetMetrics,
			Released: wake, Log: w.log})
		if err != nil {
			return err
		}
		then = append(then, w.budgets)
	}
	reap, err := newReaper(reaperConfig{Store: cfg.Store, Interval: cfg.ReapInterval,
		Reaped: w.metrics.reaped, Expired: w.metrics.jobs.WithLabelValues("expired"), HandedBack: wake,
		Then: then, Clock: cfg.Clock, Log: w.log})
	if err != nil {
		return err
	}
	w.gauges, err = newGauges(gaugesConfig{Broker: cfg.Subscriber, Store: cfg.Store, Lanes: w,
		QueueDepth: w.metrics.queueDepth, Window: &w.ingest.window, Budgets: w.budgets, Clock: cfg.Clock})
	if err != nil {
		return err
	}
	w.services = []service{w.leases, reap, w.gauges}
	if cfg.Ledger != nil {
		w.ledger, err = newLedgerSync(ledgerSyncConfig{Ledger: cfg.Ledger, Quotas: w, Replica: cfg.Replica,
			Scopes: w.scopes, Period: cfg.LedgerPeriod, Lease: cfg.LedgerLease, Clock: cfg.Clock, Log: w.log})
		if err != nil {
			return err
		}
		w.services = append(w.services, w.ledger)
	}
	if cfg.Queued != nil {
		q, err := newQueuedListener(queuedListenerConfig{Listener: cfg.Queued, Listening: w.claims.rereadModels,
			Queued: w.claims.heard, Clock: cfg.Clock, Log: w.log})
		if err != nil {
			return err
		}
		w.services = append(w.services, q)
	}
	return nil
}

// newCalls makes the call runner and the budget gate it passes every call
// through.
func (w *Worker) newCalls() error {
	cfg := w.cfg
	var err error
	w.calls, err = newCaller(callerConfig{Store: cfg.Store, DeadLetters: cfg.DeadLetters, Lanes: w.lanes, Scopes: w.scopes,
		Leases: w.leases, Estimator: w.est, Catalog: w.catalog, Chunks: cfg.Chunks,
		Policy: policy{MaxAttempts: cfg.MaxAttempts, FallbackAfter: cfg.FallbackAfter, FallbackMaxWait: cfg.FallbackMaxWait,
			FallbackOn: cfg.FallbackOn, Backoff: cfg.Backoff, OutageLimit: cfg.OutageLimit},
		RetryBudget: NewRetryBudget(cfg.RetryBudget, 0, 0), MaxRetryAfter: cfg.Backoff.MaxRetryAfter,
		StoreRetryMax: cfg.StoreRetryMax, Holds: &w.holds, TenantLabel: w.tenantLabel,
		Wake: w.claims.poke, Routed: cfg.Routed, Metrics: w.metrics, Clock: cfg.Clock, Log: w.log})
	if err != nil {
		return err
	}
	w.gate, err = newBudgetGate(budgetGateConfig{Store: cfg.Budgets, Tenants: w.tenantsNow, Alerts: cfg.BudgetAlerts,
		Metrics: w.budgetMetrics, Degrade: cfg.Router != nil, Priced: w.lanes.priced, Ends: w.calls, Log: w.log})
	if err != nil {
		return err
	}
	w.calls.budgets = w.gate
	return nil
}

// primer is a service with a first round to make before the worker
// claims its first job.
type primer interface {
	prime(ctx context.Context)
}

// startServices starts the services in order, each primed first when it
// has a first round; they run until ctx ends.
func (w *Worker) startServices(ctx context.Context) {
	for _, s := range w.services {
		if p, ok := s.(primer); ok {
			p.prime(ctx)
		}
		w.background.Add(1)
		go func() {
			defer w.background.Done()
			s.Run(ctx)
		}()
	}
}
