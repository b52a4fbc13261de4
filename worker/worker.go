package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/llmq/llmq/internal/backoff"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
)

// errShutdown is the cause of the cancellations Stop makes: jobs waiting
// for admission or backing off when it begins, and calls still in flight
// when its grace period ends, are handed back.
var errShutdown = errors.New("worker: shutting down")

// Worker moves jobs from the broker through Postgres to the upstream. Its
// parts run concurrently, each a type of its own (services.go makes them):
// the lanes (laneset.go), the scopes (tenantquota.go), the caller and its
// budget gate (caller.go, run.go, budget.go), the claimer (claimer.go,
// schedule.go), the ingester (ingester.go, ingest.go) and the background
// services; Start starts them in that order, Stop stops them in reverse
// (docs/architecture.md). What each does:
// docs/design/queue-of-record.md#the-workers-parts.
type Worker struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	est     *shaping.Estimator
	// live are the models kept as data (modellimits.go).
	live liveModels
	// sizer gives an ingested job its estimate and size delay.
	sizer store.Sizer
	// holds are the scheduler's holds, for the jobs' traces (holds.go).
	holds holdLog
	// budgetMetrics are the budgets' gauges (budget.go).
	budgetMetrics *budgetMetrics
	// budgets sweeps the budgets' orphan reservations and refreshes their
	// gauges (budgetsweep.go); nil without budgets.
	budgets *budgetSweep
	// scopeMetrics are the series of the tenants' and projects' quotas.
	scopeMetrics *scopeMetrics
	// capacity are the capacity normalisation's gauges (capacity.go).
	capacity *capacityMetrics

	// lanes are the models' shaping lanes and the pools of keys among
	// them (laneset.go, lanes.go, pool.go).
	lanes *laneSet
	// ledger keeps, with Config.Ledger, the shares of the quotas this
	// worker runs on (ledger.go); nil without.
	ledger *ledgerSync
	// scopes are the configured tenants' and projects' quota layers
	// (tenantquota.go).
	scopes *scopes

	// calls runs each claimed job until it leaves (caller.go, run.go);
	// gate reserves and settles the calls' prices on the jobs' budgets
	// (budget.go).
	calls *caller
	gate  *budgetGate

	// gauges refreshes the lanes' gauges, the queue's depth and the drain
	// estimate (observe.go).
	gauges *gauges
	// ingest records the broker's messages as queued jobs (ingester.go).
	ingest *ingester

	// leases holds the jobs this worker holds and renews their leases
	// (lease.go).
	leases *heartbeat
	// services are the background loops, started in order, every one
	// running until the last job has left (services.go).
	services []service
	// claims is the schedule loop (claimer.go, schedule.go).
	claims *claimer

	// workCtx ends when Stop's grace period is over (calls in flight are
	// cut); stopCtx, its child, when Stop begins (ingest and claims stop,
	// jobs not calling are handed back); bgCtx, independent, ends once
	// every job has left (heartbeat, reaper, gauges).
	workCtx    context.Context
	workCancel context.CancelCauseFunc
	stopCtx    context.Context
	stopCancel context.CancelCauseFunc
	bgCancel   context.CancelFunc

	background sync.WaitGroup
	startOnce  sync.Once
	stopOnce   sync.Once
	stopErr    error
}

// New validates cfg and returns a worker ready to Start.
func New(cfg Config) (*Worker, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	est := cfg.Estimator
	if est == nil {
		var err error
		if est, err = shaping.NewEstimator(shaping.EstimatorConfig{}); err != nil {
			return nil, fmt.Errorf("worker: %w", err)
		}
	}
	w := &Worker{
		cfg:           cfg,
		log:           cfg.Logger.With(slog.String("component", "worker"), slog.String("owner", cfg.Owner)),
		metrics:       newMetrics(cfg.Registerer),
		budgetMetrics: newBudgetMetrics(cfg.Registerer),
		scopeMetrics:  newScopeMetrics(cfg.Registerer),
		capacity:      newCapacityMetrics(cfg.Registerer),
		est:           est,
		sizer:         store.Sizer{Estimator: est, Catalog: cfg.Catalog, Order: cfg.SizeOrder},
	}
	if err := w.newServices(); err != nil {
		return nil, err
	}
	return w, nil
}

// Start begins ingesting and scheduling. It fails fast when the
// subscription cannot be made, then runs in the background until Stop.
func (w *Worker) Start(ctx context.Context) error {
	err := errors.New("worker: already started")
	w.startOnce.Do(func() {
		root := context.WithoutCancel(ctx)
		w.workCtx, w.workCancel = context.WithCancelCause(root)
		w.stopCtx, w.stopCancel = context.WithCancelCause(w.workCtx)
		var bgCtx context.Context
		bgCtx, w.bgCancel = context.WithCancel(root)
		var msgs <-chan *transport.Message
		msgs, err = w.cfg.Subscriber.Consume(w.stopCtx)
		if err != nil {
			w.stopCancel(err)
			w.workCancel(err)
			w.bgCancel()
			err = fmt.Errorf("worker: consume: %w", err)
			return
		}
		// In order: the lanes and the caller take the jobs' contexts, the
		// background services start (each primed first), then the
		// claimer, then the ingester. Stop goes back the other way.
		w.lanes.begin(w.stopCtx, w.workCtx)
		w.calls.begin(w.stopCtx, w.workCtx)
		w.startServices(bgCtx)
		w.claims.start(w.stopCtx)
		w.ingest.start(w.stopCtx, msgs)
	})
	return err
}

// Stop stops ingesting and claiming, hands back at once the jobs that
// wait for admission or back off, lets calls in flight finish and their
// results be stored until ctx is done or Config.ShutdownTimeout passes,
// then cuts what is left (handed back to queued). It is safe to call more
// than once.
func (w *Worker) Stop(ctx context.Context) error {
	w.stopOnce.Do(func() {
		if w.stopCancel == nil {
			return
		}
		w.stopCancel(errShutdown)
		w.ingest.wait()
		w.claims.wait()
		ctx, cancel := context.WithTimeout(ctx, w.cfg.ShutdownTimeout)
		defer cancel()
		finished := make(chan struct{})
		go func() { w.calls.runners.Wait(); close(finished) }()
		select {
		case <-finished:
		case <-ctx.Done():
			w.log.Warn("shutdown grace period over; cutting the calls in flight")
			w.workCancel(errShutdown)
			<-finished
		}
		w.workCancel(errShutdown)
		w.bgCancel()
		w.background.Wait()
		w.lanes.wait()
		w.stopErr = w.cfg.Subscriber.Close()
	})
	return w.stopErr
}

// HandedBack is the number of jobs Stop handed back to queued (claimed,
// not finished), for another worker to run.
func (w *Worker) HandedBack() int64 { return w.calls.handedBack.Load() }

// Run starts the worker and stops it when ctx is done.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	return w.Stop(context.WithoutCancel(ctx))
}

// retryDelay is the wait before try n+1 of something that failed n times
// on a database or broker error: 100 ms doubling up to max.
func retryDelay(n int, max time.Duration) time.Duration {
	return backoff.Policy{Base: 100 * time.Millisecond, Max: max}.Exp(n)
}

// sleep waits d on clock, or until ctx is done.
func sleep(ctx context.Context, clock clockwork.Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
