package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
)

// errShutdown is the cause of the work context's cancellation when Stop's
// grace period ran out; jobs seeing it hand their message back instead of
// failing.
var errShutdown = errors.New("worker: shutting down")

// Worker consumes job messages and runs each through the pipeline: decode →
// claim → (route) → schedule → shape → call → classify → store → ack.
// Messages are processed concurrently, up to Config.MaxInFlight at once, so
// a job waiting out its backoff never blocks the others.
type Worker struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	est     *shaping.Estimator

	lanesMu sync.Mutex
	lanes   map[string]*lane

	policy policy
	// policyMu guards the retry budget and the jitter source, which every
	// job's decisions share.
	policyMu sync.Mutex
	budget   *RetryBudget
	rng      *rand.Rand

	// finished counts terminal jobs; depth is the last queue depth read;
	// drain is the estimated time to empty the queue (see Drain).
	finished atomic.Int64
	depth    atomic.Int64
	drain    atomic.Int64

	// consumeCancel stops fetching; workCancel aborts in-flight jobs.
	consumeCancel context.CancelFunc
	workCtx       context.Context
	workCancel    context.CancelCauseFunc
	jobs          sync.WaitGroup
	background    sync.WaitGroup
	startOnce     sync.Once
	stopOnce      sync.Once
	stopErr       error
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
	return &Worker{
		cfg:     cfg,
		log:     cfg.Logger.With(slog.String("component", "worker"), slog.String("owner", cfg.Owner)),
		metrics: newMetrics(cfg.Registerer),
		est:     est,
		lanes:   make(map[string]*lane),
		policy: policy{
			MaxAttempts: cfg.MaxAttempts, FallbackAfter: cfg.FallbackAfter,
			FallbackMaxWait: cfg.FallbackMaxWait, Backoff: cfg.Backoff,
		},
		budget: NewRetryBudget(cfg.RetryBudget, 0, 0),
		rng:    rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
	}, nil
}

// Start begins consuming. It fails fast when the subscription cannot be
// made, then runs in the background until Stop.
func (w *Worker) Start(ctx context.Context) error {
	err := errors.New("worker: already started")
	w.startOnce.Do(func() {
		consumeCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		w.consumeCancel = cancel
		w.workCtx, w.workCancel = context.WithCancelCause(context.WithoutCancel(ctx))
		var msgs <-chan *transport.Message
		msgs, err = w.cfg.Subscriber.Consume(consumeCtx)
		if err != nil {
			cancel()
			w.workCancel(err)
			err = fmt.Errorf("worker: consume: %w", err)
			return
		}
		w.background.Add(1)
		go w.observeLoop(consumeCtx)
		// MaxInFlight long-lived processors bound the work in flight; each
		// keeps its grown stack from job to job.
		w.jobs.Add(w.cfg.MaxInFlight)
		for range w.cfg.MaxInFlight {
			go w.process(msgs)
		}
	})
	return err
}

// Stop stops fetching, lets in-flight jobs finish until ctx is done or
// Config.ShutdownTimeout passes, then hands the rest back to the broker
// (unacked, their jobs released to queued) for redelivery. It is safe to
// call more than once.
func (w *Worker) Stop(ctx context.Context) error {
	w.stopOnce.Do(func() {
		if w.consumeCancel == nil {
			return
		}
		w.consumeCancel()
		ctx, cancel := context.WithTimeout(ctx, w.cfg.ShutdownTimeout)
		defer cancel()
		finished := make(chan struct{})
		go func() { w.jobs.Wait(); close(finished) }()
		select {
		case <-finished:
		case <-ctx.Done():
			w.log.Warn("shutdown grace period over; handing in-flight jobs back")
			w.workCancel(errShutdown)
			<-finished
		}
		w.workCancel(errShutdown)
		w.background.Wait()
		w.stopErr = w.cfg.Subscriber.Close()
	})
	return w.stopErr
}

// Run starts the worker and stops it when ctx is done.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	return w.Stop(context.WithoutCancel(ctx))
}

// process handles messages one after another until the subscription ends.
func (w *Worker) process(msgs <-chan *transport.Message) {
	defer w.jobs.Done()
	for msg := range msgs {
		w.handle(w.workCtx, msg)
	}
}

// Drain is the estimated time to work off the queue at the completion rate
// of the last minute: 0 with an empty queue, DrainUnknown when jobs wait
// but none finished lately. The batch router compares it with its
// threshold.
func (w *Worker) Drain() time.Duration { return time.Duration(w.drain.Load()) }

// DrainUnknown is Drain's answer when jobs wait and none completed lately.
const DrainUnknown = 24 * time.Hour

// drainWindow is how far back the completion rate is measured.
const drainWindow = 60

// observeLoop refreshes the gauges of queue depth and lane state, and the
// drain estimate.
func (w *Worker) observeLoop(ctx context.Context) {
	defer w.background.Done()
	tick := w.cfg.Clock.NewTicker(time.Second)
	defer tick.Stop()
	var done [drainWindow]int64 // finished count per second, a ring
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.Chan():
		}
		now := w.finished.Load()
		oldest := done[(n+1)%drainWindow]
		if n+1 < drainWindow {
			oldest = done[0]
		}
		done[n%drainWindow] = now
		secs := min(n, drainWindow-1)
		w.drain.Store(int64(drainEstimate(w.depth.Load(), now-oldest, secs)))
		w.lanesMu.Lock()
		for name, l := range w.lanes {
			s := l.shaper.Snapshot()
			w.metrics.concurrencyLimit.WithLabelValues(name).Set(float64(s.ConcurrencyLimit))
			for _, b := range s.Buckets {
				w.metrics.bucketLevel.WithLabelValues(name, b.Name).Set(b.Level)
			}
		}
		w.lanesMu.Unlock()
		if n%5 == 0 {
			if d, err := w.cfg.Subscriber.Depth(ctx); err == nil {
				w.depth.Store(d)
				w.metrics.queueDepth.Set(float64(d))
			}
		}
	}
}

// job is one message in the pipeline: the decoded job, its model chain
// and the policy's state of it.
type job struct {
	msg    *transport.Message
	job    *llmq.Job
	est    shaping.Estimate
	models []string
	state  state
	start  time.Time
	// reply is the last call's: the result, or the dead letter's error.
	reply Reply
}

func (w *Worker) handle(ctx context.Context, msg *transport.Message) {
	j, err := llmq.Decode(msg.Value, llmq.DecodeOptions{MaxMessageBytes: w.cfg.MaxMessageBytes})
	if err != nil {
		w.poison(ctx, msg, err)
		return
	}
	log := w.log.With(slog.String("job_id", j.ID), slog.String("tenant", j.Tenant))
	rec, err := w.claim(ctx, j)
	switch {
	case errors.Is(err, store.ErrTerminal), errors.Is(err, store.ErrBatched):
		// Done already (a redelivery) or owned by the batch lane.
		w.ack(msg, log)
		return
	case err != nil:
		// Postgres is unreachable or refused: hold the message a moment
		// before it goes back, so a database outage is not a hot loop of
		// redeliveries.
		if ctx.Err() == nil {
			_ = sleep(ctx, w.cfg.Clock, storeRetryDelay)
		}
		w.giveBack(msg, j, false, log, err)
		return
	}
	if w.cfg.Router != nil {
		routed, err := w.cfg.Router.Route(ctx, rec)
		if err != nil {
			w.giveBack(msg, j, true, log, err)
			return
		}
		if routed {
			w.metrics.jobs.WithLabelValues(string(llmq.StatusBatched)).Inc()
			w.ack(msg, log)
			return
		}
	}
	p := &job{msg: msg, job: j, start: w.cfg.Clock.Now()}
	if p.est, err = w.est.EstimateBody(j.Body); err != nil {
		w.finishFailed(ctx, p, log, "invalid_body", err.Error())
		return
	}
	p.models = w.cfg.Catalog.Chain(j)
	w.run(ctx, p, log)
}

// claim takes the job in Postgres. When another live worker holds it, it
// waits for that lease to end (the holder may die) and tries again, so the
// job is neither run twice nor lost.
func (w *Worker) claim(ctx context.Context, j *llmq.Job) (*store.JobRecord, error) {
	for {
		rec, err := w.cfg.Store.Claim(ctx, j, w.cfg.Owner, w.cfg.Lease)
		if !errors.Is(err, store.ErrLeased) {
			return rec, err
		}
		wait := time.Second
		if rec != nil && rec.LeaseExpiresAt != nil {
			wait = w.cfg.Clock.Until(*rec.LeaseExpiresAt) + 50*time.Millisecond
		}
		wait = min(max(wait, 50*time.Millisecond), leasedRecheckMax)
		if err := sleep(ctx, w.cfg.Clock, wait); err != nil {
			return nil, err
		}
	}
}

// run performs the policy's decisions about p until the job leaves the
// pipeline: terminal, or handed back.
func (w *Worker) run(ctx context.Context, p *job, log *slog.Logger) {
	e := event{Step: stepReady}
	for {
		from := p.state.Model
		act := w.decide(p, e)
		switch act.Verb {
		case doCall:
			var ok bool
			if e, ok = w.call(ctx, p, act, log); !ok {
				return
			}
		case doRetry:
			if err := w.backoff(ctx, p, act.Delay, log); err != nil {
				w.giveBack(p.msg, p.job, true, log, err)
				return
			}
			e = event{Step: stepReady}
		case doFallBack:
			to := p.models[p.state.Model]
			w.metrics.fallbacks.WithLabelValues(p.models[from], to).Inc()
			log.Info("falling back", slog.String("from", p.models[from]), slog.String("to", to), slog.String("why", act.Why))
			e = event{Step: stepReady}
		case doSucceed:
			w.succeed(ctx, p, log)
			return
		case doFail:
			w.finishFailed(ctx, p, log, act.Code, act.Message)
			return
		case doExpire:
			w.expire(ctx, p, log, act.Why)
			return
		case doDeadLetter:
			w.deadLetter(ctx, p, act.Reason, log)
			return
		case doHandBack:
			w.giveBack(p.msg, p.job, true, log, errors.New(act.Why))
			return
		}
	}
}

// decide gives the policy p's step e with the facts only the worker knows,
// keeps the new state and returns the action. The retry budget and the
// jitter source are shared by every job: the decision and the budget's
// withdrawal happen under one lock.
func (w *Worker) decide(p *job, e event) action {
	e.Now = w.cfg.Clock.Now()
	if p.job.Deadline != nil {
		e.Deadline = *p.job.Deadline
	}
	e.Next = nextFallback(w.cfg.Catalog, p.models, p.state.Model, p.est)
	w.policyMu.Lock()
	e.BudgetLeft = w.budget.Available()
	next, act := w.policy.decide(p.state, e, w.rng)
	if act.Budgeted {
		w.budget.Withdraw()
	}
	w.policyMu.Unlock()
	p.state = next
	return act
}

// call waits for admission in the lane of p's current model and makes one
// upstream call. It returns the step that came of it, or false when the job
// left the pipeline on the way (handed back on shutdown, or failed on its
// body).
func (w *Worker) call(ctx context.Context, p *job, act action, log *slog.Logger) (event, bool) {
	model := p.models[p.state.Model]
	permit, err := w.admit(ctx, p, model, act)
	switch {
	case errors.Is(err, errLanePaused):
		return event{Step: stepLanePaused}, true
	case errors.Is(err, shaping.ErrTooLarge):
		return event{Step: stepTooLarge, Detail: err.Error()}, true
	case isWaitError(err):
		return event{Step: stepWaitTooLong, Detail: err.Error()}, true
	case err != nil:
		w.giveBack(p.msg, p.job, true, log, err)
		return event{}, false
	}
	body, err := p.job.WithModel(model)
	if err != nil {
		permit.Cancel()
		w.finishFailed(ctx, p, log, "invalid_body", err.Error())
		return event{}, false
	}
	w.metrics.inFlight.Inc()
	p.reply = w.cfg.Upstream.Call(ctx, model, body)
	w.metrics.inFlight.Dec()
	w.settle(permit, model, p.reply)
	if ctx.Err() != nil {
		// The call was cut by shutdown, not by the upstream.
		w.giveBack(p.msg, p.job, true, log, context.Cause(ctx))
		return event{}, false
	}
	if c := p.reply.Outcome.Class; c == ClassRateLimited || c == ClassRetryable {
		w.metrics.retries.WithLabelValues(model).Inc()
	}
	return event{Step: stepCalled, Outcome: p.reply.Outcome}, true
}

// backoff records the retryable failure, waits delay and claims the job
// again (retrying → running).
func (w *Worker) backoff(ctx context.Context, p *job, delay time.Duration, log *slog.Logger) error {
	wctx := context.WithoutCancel(ctx)
	out := p.reply.Outcome
	if err := w.cfg.Store.MarkRetrying(wctx, p.job.ID, w.cfg.Owner, out.Code, out.Message); err != nil {
		return err
	}
	w.metrics.jobs.WithLabelValues(string(llmq.StatusRetrying)).Inc()
	log.Debug("retrying", slog.String("code", out.Code), slog.Duration("delay", delay), slog.Int("calls", p.state.Attempts))
	if delay > w.cfg.Lease/2 {
		if err := w.cfg.Store.ExtendLease(wctx, p.job.ID, w.cfg.Owner, delay+w.cfg.Lease); err != nil {
			return err
		}
	}
	if err := sleep(ctx, w.cfg.Clock, delay); err != nil {
		return err
	}
	_, err := w.cfg.Store.Claim(ctx, p.job, w.cfg.Owner, w.cfg.Lease)
	return err
}

// admit waits in the model's lane: priority order first, then shaping,
// no longer than act.Deadline. The lane predicts waits on the worker's
// clock; the deadline's timer is the system clock's, as a job's deadline is
// wall time.
func (w *Worker) admit(ctx context.Context, p *job, model string, act action) (shaping.Permit, error) {
	if !act.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, act.Deadline)
		defer cancel()
	}
	l := w.lane(model)
	req := p.est.Request()
	if req.MaxOutputTokens == 0 {
		req.MaxOutputTokens = w.model(model).MaxOutputDefault
	}
	begin := w.cfg.Clock.Now()
	t := &ticket{ctx: ctx, req: req, maxPause: act.MaxPause, done: make(chan admission, 1)}
	l.sched.Push(t, p.job.Priority.Rank())
	a := t.wait(ctx)
	w.metrics.shapingWait.Observe(w.cfg.Clock.Now().Sub(begin).Seconds())
	if a.err != nil && !act.Deadline.IsZero() && errors.Is(a.err, context.DeadlineExceeded) && context.Cause(ctx) == context.DeadlineExceeded {
		return shaping.Permit{}, &shaping.WaitError{Deadline: act.Deadline}
	}
	return a.permit, a.err
}

// model returns the catalog entry of a model, as its lane sees it.
func (w *Worker) model(name string) llmq.Model { return laneModel(w.cfg.Catalog, name) }

func isWaitError(err error) bool {
	var we *shaping.WaitError
	return errors.As(err, &we)
}

// settle gives the lane the outcome of one call and counts it.
func (w *Worker) settle(permit shaping.Permit, model string, reply Reply) {
	out := reply.Outcome
	code := "error"
	if out.Status > 0 {
		code = strconv.Itoa(out.Status)
	}
	w.metrics.upstream.WithLabelValues(model, code).Inc()
	so := shaping.Outcome{
		RateLimited: out.Class == ClassRateLimited,
		Overloaded:  out.Status == 503 || out.Code == "timeout",
		Headers:     out.Headers,
	}
	if out.Class == ClassSuccess {
		so.PromptTokens, so.CompletionTokens = reply.PromptTokens, reply.CompletionTokens
		w.metrics.tokens.WithLabelValues(model, "prompt").Add(float64(reply.PromptTokens))
		w.metrics.tokens.WithLabelValues(model, "completion").Add(float64(reply.CompletionTokens))
		w.policyMu.Lock()
		w.budget.Deposit()
		w.policyMu.Unlock()
	}
	if err := permit.Done(so); err != nil {
		w.log.Error("settle permit", slog.Any("error", err))
	}
}

// succeed stores the upstream's answer.
func (w *Worker) succeed(ctx context.Context, p *job, log *slog.Logger) {
	model, reply := p.models[p.state.Model], p.reply
	w.est.Observe(model, p.est.PromptTokens, reply.PromptTokens)
	cost := w.model(model).Cost(reply.PromptTokens, reply.CompletionTokens)
	_, err := w.cfg.Store.StoreResult(context.WithoutCancel(ctx), p.job.ID, store.Result{
		Response: reply.Body, UsedModel: model, CostUSD: cost,
		PromptTokens: reply.PromptTokens, CompletionTokens: reply.CompletionTokens,
	})
	if err != nil {
		// The result could not be stored: leave the message for redelivery
		// rather than acking work that is not durable.
		w.giveBack(p.msg, p.job, false, log, err)
		return
	}
	w.finish(p, llmq.StatusSucceeded, log)
}

func (w *Worker) finishFailed(ctx context.Context, p *job, log *slog.Logger, code, msg string) {
	if err := w.cfg.Store.MarkFailed(context.WithoutCancel(ctx), p.job.ID, code, msg); err != nil && !errors.Is(err, store.ErrTerminal) {
		w.giveBack(p.msg, p.job, false, log, err)
		return
	}
	log.Info("job failed", slog.String("code", code), slog.String("error", msg))
	w.finish(p, llmq.StatusFailed, log)
}

func (w *Worker) expire(ctx context.Context, p *job, log *slog.Logger, why string) {
	if err := w.cfg.Store.MarkExpired(context.WithoutCancel(ctx), p.job.ID); err != nil && !errors.Is(err, store.ErrTerminal) {
		w.giveBack(p.msg, p.job, false, log, err)
		return
	}
	log.Info("job expired", slog.String("why", why))
	w.finish(p, llmq.StatusExpired, log)
}

func (w *Worker) deadLetter(ctx context.Context, p *job, reason dlq.Reason, log *slog.Logger) {
	l := dlq.Letter{
		JobID: p.job.ID, Tenant: p.job.Tenant, Reason: reason, Attempts: p.state.Attempts,
		LastError: p.reply.Outcome.Code + ": " + p.reply.Outcome.Message, Model: p.models[p.state.Model],
		Message: p.msg.Value, Key: p.msg.Key, Headers: p.msg.Headers, Source: p.msg.Source,
		At: w.cfg.Clock.Now(),
	}
	if err := w.cfg.DeadLetters.DeadLetter(context.WithoutCancel(ctx), l); err != nil {
		w.giveBack(p.msg, p.job, false, log, err)
		return
	}
	w.metrics.deadLetters.WithLabelValues(string(reason)).Inc()
	log.Warn("job dead-lettered", slog.String("reason", string(reason)), slog.String("last_error", l.LastError))
	w.finish(p, llmq.StatusDeadLettered, log)
}

// poison dead-letters a message that is not a valid job, then acks it.
func (w *Worker) poison(ctx context.Context, msg *transport.Message, cause error) {
	var hint struct {
		ID     string `json:"id"`
		Tenant string `json:"tenant"`
	}
	_ = json.Unmarshal(msg.Value, &hint) // best effort: name the job if it can be read
	l := dlq.Letter{
		JobID: hint.ID, Tenant: hint.Tenant, Reason: dlq.ReasonPoison, LastError: cause.Error(),
		Message: msg.Value, Key: msg.Key, Headers: msg.Headers, Source: msg.Source, At: w.cfg.Clock.Now(),
	}
	log := w.log.With(slog.String("source", msg.Source))
	if err := w.cfg.DeadLetters.DeadLetter(context.WithoutCancel(ctx), l); err != nil {
		log.Error("dead-letter poison message; leaving it for redelivery", slog.Any("error", err))
		w.nack(msg, log)
		return
	}
	w.metrics.deadLetters.WithLabelValues(string(dlq.ReasonPoison)).Inc()
	w.metrics.jobs.WithLabelValues(string(llmq.StatusDeadLettered)).Inc()
	log.Warn("poison message dead-lettered", slog.String("error", cause.Error()))
	w.ack(msg, log)
}

// drainEstimate is depth / (finished per second over secs seconds).
func drainEstimate(depth, finished int64, secs int) time.Duration {
	switch {
	case depth <= 0:
		return 0
	case finished <= 0 || secs <= 0:
		return DrainUnknown
	}
	seconds := float64(depth) / (float64(finished) / float64(secs))
	if seconds >= DrainUnknown.Seconds() {
		return DrainUnknown
	}
	return time.Duration(seconds * float64(time.Second))
}

// finish counts a terminal job and acks its message.
func (w *Worker) finish(p *job, status llmq.Status, log *slog.Logger) {
	w.finished.Add(1)
	w.metrics.jobs.WithLabelValues(string(status)).Inc()
	w.metrics.jobDuration.Observe(w.cfg.Clock.Now().Sub(p.start).Seconds())
	w.ack(p.msg, log)
}

// giveBack leaves a job unfinished: its claim is released (when held) and
// its message goes back to the broker for redelivery.
func (w *Worker) giveBack(msg *transport.Message, j *llmq.Job, claimed bool, log *slog.Logger, cause error) {
	if !errors.Is(cause, errShutdown) && !errors.Is(cause, context.Canceled) {
		log.Error("job handed back for redelivery", slog.Any("error", cause))
	}
	if claimed && j != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := w.cfg.Store.Release(ctx, j.ID, w.cfg.Owner)
		cancel()
		if err != nil && !errors.Is(err, store.ErrTerminal) {
			log.Warn("release job", slog.Any("error", err))
		}
	}
	w.nack(msg, log)
}

func (w *Worker) ack(msg *transport.Message, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch err := msg.Ack(ctx); {
	case err == nil, errors.Is(err, transport.ErrClosed):
	case errors.Is(err, transport.ErrStaleDelivery):
		// A rebalance or reconnect took the message away; it comes back
		// and its claim finds the job terminal.
		log.Debug("ack of a stale delivery", slog.Any("error", err))
	default:
		log.Error("ack", slog.Any("error", err))
	}
}

func (w *Worker) nack(msg *transport.Message, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := msg.Nack(ctx); err != nil && !errors.Is(err, transport.ErrClosed) && !errors.Is(err, transport.ErrStaleDelivery) {
		log.Error("nack", slog.Any("error", err))
	}
}

// sleep waits d on clock, or until ctx is done.
func sleep(ctx context.Context, clock clockwork.Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-clock.After(d):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
