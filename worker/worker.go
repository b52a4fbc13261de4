package worker

import (
	"cmp"
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

	budgetMu sync.Mutex
	budget   *RetryBudget
	rngMu    sync.Mutex
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
		budget:  NewRetryBudget(cfg.RetryBudget, 0, 0),
		rng:     rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
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

// job is the state of one message in the pipeline.
type job struct {
	msg     *transport.Message
	job     *llmq.Job
	est     shaping.Estimate
	models  []string
	model   int
	calls   int
	retries int
	// rateLimited counts the 429s of the current model.
	rateLimited int
	start       time.Time
	last        Outcome
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

// run makes upstream attempts until the job reaches a terminal state or the
// worker shuts down.
func (w *Worker) run(ctx context.Context, p *job, log *slog.Logger) {
	for {
		model := p.models[p.model]
		if p.calls == 0 && w.pastDeadline(p.job) {
			w.expire(ctx, p, log, "deadline passed before the job started")
			return
		}
		permit, err := w.admit(ctx, p, model)
		switch {
		case errors.Is(err, errLanePaused) && w.fallBack(p, "lane paused by 429s", log):
			continue
		case errors.Is(err, shaping.ErrTooLarge):
			w.finishFailed(ctx, p, log, "request_too_large", err.Error())
			return
		case isWaitError(err):
			w.expire(ctx, p, log, "predicted wait passes the deadline: "+err.Error())
			return
		case err != nil:
			w.giveBack(p.msg, p.job, true, log, err)
			return
		}
		body, err := p.job.WithModel(model)
		if err != nil {
			permit.Cancel()
			w.finishFailed(ctx, p, log, "invalid_body", err.Error())
			return
		}
		w.metrics.inFlight.Inc()
		reply := w.cfg.Upstream.Call(ctx, model, body)
		w.metrics.inFlight.Dec()
		p.calls++
		out := reply.Outcome
		p.last = out
		w.settle(permit, model, reply)
		if ctx.Err() != nil {
			// The call was cut by shutdown, not by the upstream.
			w.giveBack(p.msg, p.job, true, log, context.Cause(ctx))
			return
		}
		switch out.Class {
		case ClassSuccess:
			w.succeed(ctx, p, model, reply, log)
			return
		case ClassPermanent:
			w.finishFailed(ctx, p, log, out.Code, out.Message)
			return
		}
		w.metrics.retries.WithLabelValues(model).Inc()
		if p.calls >= w.cfg.MaxAttempts {
			w.deadLetter(ctx, p, dlq.ReasonRetriesExhausted, log)
			return
		}
		if out.Class == ClassRateLimited {
			p.rateLimited++
			switch {
			case p.rateLimited >= w.cfg.FallbackAfter && w.fallBack(p, "rate limited "+strconv.Itoa(p.rateLimited)+" times", log):
				continue
			case out.Headers.RetryAfter > w.cfg.FallbackMaxWait && w.fallBack(p, "retry-after "+out.Headers.RetryAfter.String(), log):
				continue
			}
		}
		w.budgetMu.Lock()
		budgeted := w.budget.Withdraw()
		w.budgetMu.Unlock()
		if !budgeted && out.Class == ClassRateLimited && w.fallBack(p, "retry budget spent", log) {
			continue
		}
		if err := w.backoff(ctx, p, out, budgeted, log); err != nil {
			w.giveBack(p.msg, p.job, true, log, err)
			return
		}
	}
}

// fallBack moves p to its next usable fallback model, reporting whether
// there was one.
func (w *Worker) fallBack(p *job, why string, log *slog.Logger) bool {
	next, ok := w.nextFallback(p)
	if !ok {
		return false
	}
	from, to := p.models[p.model], p.models[next]
	w.metrics.fallbacks.WithLabelValues(from, to).Inc()
	log.Info("falling back", slog.String("from", from), slog.String("to", to), slog.String("why", why))
	p.model, p.rateLimited = next, 0
	return true
}

// nextFallback returns the index of the next model in the chain whose
// context window fits the request.
func (w *Worker) nextFallback(p *job) (int, bool) {
	for i := p.model + 1; i < len(p.models); i++ {
		m := w.cfg.model(p.models[i])
		if need := p.est.PromptTokens + cmp.Or(p.est.MaxOutputTokens, m.MaxOutputDefault); m.ContextWindow > 0 && need > m.ContextWindow {
			continue
		}
		return i, true
	}
	return 0, false
}

// backoff records the retryable failure, waits out the delay (the longest
// one when the retry budget refused this retry), and claims the job again
// (retrying → running).
func (w *Worker) backoff(ctx context.Context, p *job, out Outcome, budgeted bool, log *slog.Logger) error {
	wctx := context.WithoutCancel(ctx)
	if err := w.cfg.Store.MarkRetrying(wctx, p.job.ID, w.cfg.Owner, out.Code, out.Message); err != nil {
		return err
	}
	w.metrics.jobs.WithLabelValues(string(llmq.StatusRetrying)).Inc()
	var delay time.Duration
	if budgeted {
		w.rngMu.Lock()
		delay = w.cfg.Backoff.Delay(p.retries, out.Headers.RetryAfter, w.rng)
		w.rngMu.Unlock()
	} else {
		delay = max(w.cfg.Backoff.Max, out.Headers.RetryAfter)
	}
	p.retries++
	log.Debug("retrying", slog.String("code", out.Code), slog.Duration("delay", delay), slog.Int("calls", p.calls))
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

// admit waits in the model's lane: priority order first, then shaping. The
// first attempt waits no longer than the job's deadline.
func (w *Worker) admit(ctx context.Context, p *job, model string) (shaping.Permit, error) {
	if p.calls == 0 && p.job.Deadline != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, *p.job.Deadline)
		defer cancel()
	}
	l := w.lane(model)
	req := p.est.Request()
	if req.MaxOutputTokens == 0 {
		req.MaxOutputTokens = w.cfg.model(model).MaxOutputDefault
	}
	begin := w.cfg.Clock.Now()
	t := &ticket{ctx: ctx, req: req, done: make(chan admission, 1)}
	if _, ok := w.nextFallback(p); ok {
		t.maxPause = w.cfg.FallbackMaxWait
	}
	l.sched.Push(t, p.job.Priority.Rank())
	a := t.wait(ctx)
	w.metrics.shapingWait.Observe(w.cfg.Clock.Now().Sub(begin).Seconds())
	if a.err != nil && p.job.Deadline != nil && errors.Is(a.err, context.DeadlineExceeded) && context.Cause(ctx) == context.DeadlineExceeded {
		return shaping.Permit{}, &shaping.WaitError{Deadline: *p.job.Deadline}
	}
	return a.permit, a.err
}

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
		w.budgetMu.Lock()
		w.budget.Deposit()
		w.budgetMu.Unlock()
	}
	if err := permit.Done(so); err != nil {
		w.log.Error("settle permit", slog.Any("error", err))
	}
}

// succeed stores the upstream's answer.
func (w *Worker) succeed(ctx context.Context, p *job, model string, reply Reply, log *slog.Logger) {
	w.est.Observe(model, p.est.PromptTokens, reply.PromptTokens)
	cost := w.cfg.model(model).Cost(reply.PromptTokens, reply.CompletionTokens)
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
		JobID: p.job.ID, Tenant: p.job.Tenant, Reason: reason, Attempts: p.calls,
		LastError: p.last.Code + ": " + p.last.Message, Model: p.models[p.model],
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

func (w *Worker) pastDeadline(j *llmq.Job) bool {
	return j.Deadline != nil && !w.cfg.Clock.Now().Before(*j.Deadline)
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
