package worker

import (
	"context"
)

// service is one of the worker's background loops: Run returns soon after
// ctx ends. Each is a type of its own with its own configuration and lock
// (lease.go, reaper.go, observe.go, ledger.go, queued.go). The worker
// makes them in New and starts them in the order of Worker.services; Stop
// ends them all once every job has left, and waits for them.
type service interface {
	Run(ctx context.Context)
}

// newServices makes the worker's background services from its
// configuration.
func (w *Worker) newServices() error {
	var err error
	w.ingest, err = newIngester(ingesterConfig{Store: w.cfg.Store, DeadLetters: w.cfg.DeadLetters, Tenants: w.tenantsNow,
		Catalog: w.cfg.Catalog, Sizer: w.sizer, TenantReplies: w.cfg.TenantReplies, ResultsTopic: w.cfg.ResultsTopic,
		MaxMessageBytes: w.cfg.MaxMessageBytes, Window: w.cfg.IngestWindow, TenantCap: w.cfg.TenantCap,
		Batch: w.cfg.IngestBatch, Prefetch: w.cfg.IngestPrefetch, Recorded: w.learnModel, Wake: w.poke,
		Metrics: w.metrics, Clock: w.cfg.Clock, Log: w.log})
	if err != nil {
		return err
	}
	w.leases, err = newHeartbeat(heartbeatConfig{Store: w.cfg.Store, Owner: w.cfg.Owner, Lease: w.cfg.Lease,
		Interval: w.cfg.HeartbeatInterval, Clock: w.cfg.Clock, Log: w.log})
	if err != nil {
		return err
	}
	if err := w.newCalls(); err != nil {
		return err
	}
	var then []sweeper
	if w.cfg.Budgets != nil && (w.cfg.LiveTenants != nil || w.cfg.Tenants.HasBudgets()) {
		w.budgets, err = newBudgetSweep(budgetSweepConfig{Store: w.cfg.Budgets, Metrics: w.budgetMetrics,
			Released: w.poke, Log: w.log})
		if err != nil {
			return err
		}
		then = append(then, w.budgets)
	}
	reap, err := newReaper(reaperConfig{Store: w.cfg.Store, Interval: w.cfg.ReapInterval,
		Reaped: w.metrics.reaped, Expired: w.metrics.jobs.WithLabelValues("expired"), HandedBack: w.poke,
		Then: then, Clock: w.cfg.Clock, Log: w.log})
	if err != nil {
		return err
	}
	w.gauges, err = newGauges(gaugesConfig{Broker: w.cfg.Subscriber, Store: w.cfg.Store, Lanes: w,
		QueueDepth: w.metrics.queueDepth, Window: &w.ingest.window, Budgets: w.budgets, Clock: w.cfg.Clock})
	if err != nil {
		return err
	}
	w.services = []service{w.leases, reap, w.gauges}
	if w.cfg.Ledger != nil {
		w.ledger, err = newLedgerSync(ledgerSyncConfig{Ledger: w.cfg.Ledger, Quotas: w, Replica: w.cfg.Replica,
			Scopes: &w.scopes, Period: w.cfg.LedgerPeriod, Lease: w.cfg.LedgerLease, Clock: w.cfg.Clock, Log: w.log})
		if err != nil {
			return err
		}
		w.services = append(w.services, w.ledger)
	}
	if w.cfg.Queued != nil {
		q, err := newQueuedListener(queuedListenerConfig{Listener: w.cfg.Queued, Listening: w.rereadModels,
			Queued: func(model string) { w.learnModel(model); w.poke() }, Clock: w.cfg.Clock, Log: w.log})
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
	w.calls, err = newCaller(callerConfig{Store: cfg.Store, DeadLetters: cfg.DeadLetters, Lanes: w, Scopes: w,
		Leases: w.leases, Estimator: w.est, Catalog: cfg.Catalog,
		Policy: policy{MaxAttempts: cfg.MaxAttempts, FallbackAfter: cfg.FallbackAfter, FallbackMaxWait: cfg.FallbackMaxWait,
			FallbackOn: cfg.FallbackOn, Backoff: cfg.Backoff, OutageLimit: cfg.OutageLimit},
		RetryBudget: NewRetryBudget(cfg.RetryBudget, 0, 0), MaxRetryAfter: cfg.Backoff.MaxRetryAfter,
		StoreRetryMax: cfg.StoreRetryMax, Holds: &w.holds, Unserved: &w.unserved, TenantLabel: w.tenantLabel,
		Wake: w.poke, Metrics: w.metrics, Clock: cfg.Clock, Log: w.log})
	if err != nil {
		return err
	}
	w.gate, err = newBudgetGate(budgetGateConfig{Store: cfg.Budgets, Tenants: w.tenantsNow, Alerts: cfg.BudgetAlerts,
		Metrics: w.budgetMetrics, Degrade: cfg.Router != nil, Priced: w.priced, Ends: w.calls, Log: w.log})
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
