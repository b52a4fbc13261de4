package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
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
// parts run concurrently (docs/design/queue-of-record.md): ingest
// (ingest.go), schedule (schedule.go), run (run.go, policy.go) and the
// background services (services.go: heartbeat, reaper, gauges, ledger
// sync). What each does: docs/design/queue-of-record.md#the-workers-parts.
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

	lanesMu sync.Mutex
	lanes   map[string]*lane
	// unbound counts, per model with a pool of keys, its jobs claimed
	// that have not chosen an entry yet (pool.go).
	unbound map[string]*lane
	// ledger keeps, with Config.Ledger, the shares of the quotas this
	// worker runs on (ledger.go); nil without.
	ledger *ledgerSync
	// scopes are the configured tenants' and projects' quota layers
	// (tenantquota.go).
	scopes scopes

	policy policy
	// policyMu guards the retry budget and the jitter source, which every
	// job's decisions share.
	policyMu sync.Mutex
	budget   *RetryBudget
	rng      *rand.Rand

	// gauges refreshes the lanes' gauges, the queue's depth and the drain
	// estimate (observe.go).
	gauges *gauges
	ingestState

	// leases holds the jobs this worker holds and renews their leases
	// (lease.go).
	leases *heartbeat
	// services are the background loops, started in order, every one
	// running until the last job has left (services.go).
	services []service
	// inFlight counts the jobs held (claimed, not yet finished).
	inFlight atomic.Int64
	// handedBack counts the jobs released to queued by the shutdown.
	handedBack atomic.Int64
	// wake tells the scheduler that room or work appeared.
	wake chan struct{}
	// newModels carries the models of freshly ingested jobs to the
	// scheduler.
	modelsMu  sync.Mutex
	newModels map[string]bool
	// unserved are the fallback models the provider answered 404 for.
	unserved unservedModels
	// reread makes the next claim round read the queued models again (the
	// queued listener listens again: what was recorded meanwhile was not
	// announced).
	reread atomic.Bool

	// workCtx ends when Stop's grace period is over (calls in flight are
	// cut); stopCtx, its child, when Stop begins (ingest and claims stop,
	// jobs not calling are handed back); bgCtx, independent, ends once
	// every job has left (heartbeat, reaper, gauges).
	workCtx    context.Context
	workCancel context.CancelCauseFunc
	stopCtx    context.Context
	stopCancel context.CancelCauseFunc
	bgCancel   context.CancelFunc

	ingesters  sync.WaitGroup
	scheduling sync.WaitGroup
	runners    sync.WaitGroup
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
		lanes:         make(map[string]*lane),
		unbound:       make(map[string]*lane),
		policy: policy{
			MaxAttempts: cfg.MaxAttempts, FallbackAfter: cfg.FallbackAfter,
			FallbackMaxWait: cfg.FallbackMaxWait, FallbackOn: cfg.FallbackOn, Backoff: cfg.Backoff,
			OutageLimit: cfg.OutageLimit,
		},
		budget:      NewRetryBudget(cfg.RetryBudget, 0, 0),
		rng:         rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		wake:        make(chan struct{}, 1),
		newModels:   make(map[string]bool),
		ingestState: ingestState{deliveries: newDeliveries()},
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
		w.startServices(bgCtx)
		w.scheduling.Add(1)
		go w.scheduleLoop()
		// The messages queue up in a buffer while a batch is recorded, so
		// the next batch takes them all; two ingesters, one recording a
		// batch while the other gathers the next. The subscriber's
		// prefetch bounds the messages delivered and not yet acked.
		buf := make(chan *transport.Message, w.cfg.IngestPrefetch)
		w.ingesters.Add(1 + ingesters)
		go w.forward(msgs, buf)
		for range ingesters {
			go w.ingestLoop(buf)
		}
	})
	return err
}

// ingesters is the number of ingest loops.
const ingesters = 2

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
		w.ingesters.Wait()
		w.scheduling.Wait()
		ctx, cancel := context.WithTimeout(ctx, w.cfg.ShutdownTimeout)
		defer cancel()
		finished := make(chan struct{})
		go func() { w.runners.Wait(); close(finished) }()
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
		w.stopErr = w.cfg.Subscriber.Close()
	})
	return w.stopErr
}

// HandedBack is the number of jobs Stop handed back to queued (claimed,
// not finished), for another worker to run.
func (w *Worker) HandedBack() int64 { return w.handedBack.Load() }

// Run starts the worker and stops it when ctx is done.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	return w.Stop(context.WithoutCancel(ctx))
}

// poke wakes the scheduler (it looks again at every model).
func (w *Worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
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
