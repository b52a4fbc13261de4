package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/tracing"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
)

// Run: each claimed job goes through the pipeline until it is terminal, or
// handed back: admission in its model's lane, the call recorded before it
// starts (MarkCalling: attempts are per job, whatever the claims), the
// call, and the pure policy's decision about what came of it (policy.go,
// docs/worker-policy.md). Every write is fenced to the job's lease; a
// result is stored whatever the lease, until it lands.

// job is one claimed job in the pipeline.
type job struct {
	rec   *store.JobRecord
	lease store.Lease
	job   *llmq.Job
	// req is the admission request: the prompt (with the estimator's
	// safety factor) and the output allowance.
	req    shaping.Request
	models []string
	state  state
	// entry is the index of the pool entry of the current model the job
	// calls (-1: not chosen yet; 0 for a model without a pool); left has
	// a bit set for each entry the job left since its last call, which it
	// does not move back to (pool.go).
	entry int
	left  uint32
	start time.Time
	// reply is the last call's: the result, or the dead letter's error.
	reply Reply
	log   *slog.Logger
	// ctx ends when the worker stops or the lease is lost (cause
	// errShutdown or errLeaseLost): the waits for admission and backoff end
	// with it; a call in flight does not.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// seq is the registration number the heartbeat compares against.
	seq uint64
	// pendingIn is the lane whose pending count holds the job (nil: none),
	// with pendingTokens of its tokens; its scopes' pending counts hold it
	// at the same time. tokens is what the job counts as when it moves:
	// its estimate as the claim counts it, its admission request once
	// prepared.
	pendingMu     sync.Mutex
	pendingIn     *lane
	pendingTokens int64
	tokens        int64
	// scopes are its tenant's and project's quota layers (nil for a
	// tenant the configuration gives none).
	scopes []*scopeQuota
	// writeFails counts the database errors of the job's writes in a row.
	writeFails int
	// attempt is what is not yet written of the job's calls (attempts.go).
	attempt attempt
	// trace is the job's run span (tracing.go); nil when tracing is off.
	trace *tracing.Job
}

// lose cancels what the job waits for: its lease was taken.
func (p *job) lose() { p.cancel(errLeaseLost) }

// setPending moves the job's pending count to lane l (nil: none).
func (p *job) setPending(l *lane) {
	p.pendingMu.Lock()
	defer p.pendingMu.Unlock()
	if p.pendingIn == l {
		return
	}
	if p.pendingIn != nil {
		p.pendingIn.pending.Add(-1)
		p.pendingIn.pendingTokens.Add(-p.pendingTokens)
	}
	p.pendingTokens = 0
	if l != nil {
		l.pending.Add(1)
		p.pendingTokens = p.tokens
		l.pendingTokens.Add(p.pendingTokens)
	}
	if (p.pendingIn == nil) != (l == nil) {
		d := int64(1)
		if l == nil {
			d = -1
		}
		for _, sc := range p.scopes {
			sc.pending.Add(d)
		}
	}
	p.pendingIn = l
}

// start runs the claimed job rec in a goroutine of its own.
func (w *Worker) start(rec *store.JobRecord) {
	p := &job{rec: rec, lease: rec.Lease(), start: w.cfg.Clock.Now(),
		log: w.log.With(slog.String("job_id", rec.ID), slog.String("tenant", rec.Tenant))}
	p.ctx, p.cancel = context.WithCancelCause(w.stopCtx)
	w.inFlight.Add(1)
	w.metrics.claimed.Inc()
	w.leases.register(p)
	// A job recorded by another path (the producer's outbox, an older
	// configuration) may name a model the catalog does not allow: it is
	// dead-lettered without a lane.
	p.job = rec.Job()
	w.traceStart(p, rec)
	p.scopes = w.scopesOf(rec.Tenant, rec.Project)
	refused := w.catalog().CheckModels(p.job)
	var l *lane
	if len(refused) == 0 {
		l = w.lane(rec.RequestedModel)
		// As the claim counted it (a job recorded without an estimate as
		// the lane's typical one) until prepare estimates it.
		p.tokens = int64(rec.EstPromptTokens + rec.EstOutputTokens)
		if p.tokens == 0 {
			p.tokens = int64(l.typical().MaxOutputTokens)
		}
		p.setPending(cmp.Or(w.unboundOf(rec.RequestedModel), l))
	}
	w.runners.Add(1)
	go func() {
		defer func() {
			p.trace.End()
			p.setPending(nil)
			p.cancel(nil)
			w.leases.unregister(p)
			w.inFlight.Add(-1)
			w.runners.Done()
			w.poke()
		}()
		switch {
		case len(refused) > 0:
			w.deadLetter(p, dlq.ReasonModelNotAllowed, notAllowed(refused))
		case w.prepare(p, l):
			w.run(p)
		}
	}()
}

// prepare rebuilds the job from its record: its model chain, the admission
// request (from the ingest estimate, or estimated now) and the policy's
// state as the last holder left it. A body that no longer parses fails the
// job.
func (w *Worker) prepare(p *job, l *lane) bool {
	p.models = w.catalog().Chain(p.job)
	prompt, out := p.rec.EstPromptTokens, p.rec.EstOutputTokens
	if prompt == 0 && out == 0 {
		// Recorded by the producer or the API: estimated here, once.
		est, err := w.est.EstimateBody(p.job.Body)
		if err != nil {
			w.fail(p, 0, "invalid_body", err.Error())
			return false
		}
		prompt, out = est.PromptTokens, cmp.Or(est.MaxOutputTokens, est.N*w.model(p.job.Model()).MaxOutputDefault)
	}
	safe := int(float64(prompt)*w.est.Safety(p.job.Model()) + 0.999)
	p.req = shaping.Request{PromptTokens: safe, MaxOutputTokens: out}
	p.pendingMu.Lock()
	p.tokens = int64(safe + out)
	p.pendingMu.Unlock()
	l.observe(p.req)
	p.req.Quotas = requestQuotas(p.scopes)
	// The free calls of its earlier holders stay free (stored with the job).
	p.state = state{Attempts: p.rec.Attempts - p.rec.FreeAttempts, Free: p.rec.FreeAttempts, Retries: p.rec.Retries,
		Model: p.rec.ModelIndex, RateLimited: p.rec.RateLimited}
	p.entry = -1
	if p.state.Model >= len(p.models) {
		// The configured fallbacks changed since: start over on the model.
		p.state.Model, p.state.RateLimited = 0, 0
	}
	return true
}

// run performs the policy's decisions about p until the job leaves the
// pipeline.
func (w *Worker) run(p *job) {
	e := event{Step: stepReady}
	for {
		from := p.state.Model
		act := w.decide(p, e)
		switch act.Verb {
		case doCall:
			var ok bool
			if e, ok = w.call(p, act); !ok {
				return
			}
		case doRetry:
			w.metrics.retries.WithLabelValues(p.models[p.state.Model]).Inc()
			p.trace.Event("retry", attribute.Float64("llmq.delay_s", act.Delay.Seconds()))
			if !w.backoff(p, act.Delay) {
				return
			}
			e = event{Step: stepReady}
		case doSwitchEntry:
			model, from := p.models[p.state.Model], w.entryName(p, p.models[p.state.Model])
			p.left |= 1 << p.entry
			p.entry = act.Entry
			to := w.entryName(p, model)
			w.metrics.entrySwitches.WithLabelValues(model, from, to).Inc()
			p.trace.Event("pool_entry_switch", attribute.String("llmq.from", from), attribute.String("llmq.to", to))
			p.log.Info("moving to another key of the pool", slog.String("model", model), slog.String("from", from),
				slog.String("to", to), slog.String("why", act.Why))
			e = event{Step: stepReady}
		case doFallBack:
			p.entry, p.left = -1, 0
			to := p.models[p.state.Model]
			w.metrics.fallbacks.WithLabelValues(p.models[from], to).Inc()
			p.trace.Event("fallback", attribute.String("llmq.from", p.models[from]), attribute.String("llmq.to", to))
			p.log.Info("falling back", slog.String("from", p.models[from]), slog.String("to", to), slog.String("why", act.Why))
			e = event{Step: stepReady}
		case doSucceed:
			w.succeed(p)
			return
		case doFail:
			w.fail(p, act.Status, act.Code, act.Message)
			return
		case doExpire:
			w.end(p, llmq.StatusExpired, act.Why, func(ctx context.Context) error {
				return w.cfg.Store.MarkExpired(ctx, p.lease, act.Why)
			})
			return
		case doDeadLetter:
			w.deadLetter(p, act.Reason, p.reply.Outcome.Code+": "+p.reply.Outcome.Message)
			return
		case doHandBack:
			p.log.Info("job handed back", slog.String("why", act.Why))
			w.release(p)
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
	if e.Step == stepCalled && p.state.Model > 0 && isNotFound(e.Outcome) {
		w.unserved.mark(p.models[p.state.Model], e.Now)
	}
	e.Next = nextFallback(w.catalog(), p.models, p.state.Model, shaping.Estimate{
		PromptTokens: p.req.PromptTokens, MaxOutputTokens: p.req.MaxOutputTokens},
		func(model string) bool { return w.unserved.has(model, e.Now) })
	if model := p.models[p.state.Model]; len(w.pool(model)) > 1 {
		e.Pooled = true
		// Only where the policy may move the job: the check may read the
		// budgets.
		if e.Step == stepLanePaused || e.Step == stepCalled && e.Outcome.Class != ClassSuccess && e.Outcome.Class != ClassPermanent {
			e.Entry = w.nextEntry(p, model)
		}
	}
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

// call waits for admission in the lane of p's current model, records the
// call and makes it. It returns the step that came of it, or false when the
// job left the pipeline on the way.
func (w *Worker) call(p *job, act action) (event, bool) {
	model := p.models[p.state.Model]
	if p.entry < 0 {
		p.entry = w.pickEntry(p, model)
	}
	l := w.laneAt(model, p.entry)
	a, ev, stay, ok := w.admitCall(p, model, l, act)
	if !ok {
		return ev, stay
	}
	body, ev, stay, ok := w.callBody(p, model, &a)
	if !ok {
		return ev, stay
	}
	if ev, stay, ok := w.markCalling(p, model, l, &a); !ok {
		return ev, stay
	}
	return w.makeCall(p, model, l, &a, body)
}

// admitCall waits for admission in lane l. Without one (ok false) it
// returns the step that came of it, or false when the job left.
func (w *Worker) admitCall(p *job, model string, l *lane, act action) (_ admission, _ event, stay, ok bool) {
	p.setPending(l)
	ws := p.trace.Child(tracing.SpanQuotaWait)
	a, err := w.admit(p, l, act)
	endQuotaWait(ws, model, a, err)
	switch {
	case errors.Is(err, errLanePaused):
		return a, event{Step: stepLanePaused}, true, false
	case errors.Is(err, errLaneUnshared):
		p.log.Info("job handed back", slog.String("why", err.Error()))
		w.release(p)
		return a, event{}, false, false
	case errors.Is(err, shaping.ErrTooLarge):
		return a, event{Step: stepTooLarge, Detail: err.Error()}, true, false
	case isWaitError(err):
		return a, event{Step: stepWaitTooLong, Detail: err.Error()}, true, false
	case err != nil:
		w.leave(p)
		return a, event{}, false, false
	}
	return a, event{}, false, true
}

// callBody is the body of the call to model, after the budget gate; when
// the call is not made (ok false) the admission is given back.
func (w *Worker) callBody(p *job, model string, a *admission) (_ json.RawMessage, _ event, stay, ok bool) {
	permit := a.permit
	// The body as recorded when it names the model called (every job's
	// first model): decoding and encoding it again would change nothing.
	body := p.job.Body
	if model != p.job.Model() {
		var err error
		if body, err = p.job.WithModel(model); err != nil {
			permit.Cancel()
			a.notCalled()
			a.releaseScopes()
			w.fail(p, 0, "invalid_body", err.Error())
			return nil, event{}, false, false
		}
	}
	body, ev, stay, proceed := w.budgetGate(p, model, body)
	if !proceed {
		permit.Cancel()
		a.notCalled()
		return nil, ev, stay, false
	}
	return body, event{}, false, true
}

// markCalling records the call. When the record fails (ok false) the
// admission and the budget go back, and the job is admitted again or left.
func (w *Worker) markCalling(p *job, model string, l *lane, a *admission) (_ event, stay, ok bool) {
	// Recorded on a context Stop does not cut: once the call is recorded
	// it is made (a call in flight finishes at shutdown); a lease lost
	// meanwhile fails the record, fenced.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), markTimeout)
	attempts, err := w.cfg.Store.MarkCalling(mctx, p.lease, p.attempt.call(p.state.stored(), model, l.entry, a.waited))
	cancel()
	if err != nil {
		permit := a.permit
		w.endBudget(p, model, nil)
		permit.Cancel()
		a.notCalled()
		a.releaseScopes()
		if w.gone(p, "mark calling", err) || !w.pause(p) {
			return event{}, false, false
		}
		return event{Step: stepReady}, true, false // admitted again, then recorded
	}
	p.writeFails = 0
	p.left = 0
	p.attempt.called(attempts)
	// The call is counted before it starts: the policy counts it again
	// when it answers.
	p.state.Attempts = attempts - 1 - p.state.Free
	return event{}, false, true
}

// makeCall makes the recorded call and settles it: the lane, the scopes
// and the budget. It returns the step, or false when shutdown cut it.
func (w *Worker) makeCall(p *job, model string, l *lane, a *admission, body json.RawMessage) (event, bool) {
	permit := a.permit
	p.setPending(nil)
	w.metrics.inFlight.Inc()
	begin := w.cfg.Clock.Now()
	cs := p.trace.Child(tracing.SpanCall)
	ctx, sink := w.streamTo(withCallOf(p.trace.Context(w.workCtx), p.rec.Tenant, p.rec.ID), p)
	p.reply = l.up.Call(ctx, model, body)
	partial := sink.finish(&p.reply, p.req.PromptTokens)
	w.endCall(cs, p, model)
	// A call cut by shutdown, not by the upstream (an answer that arrived
	// is stored all the same); a stream the caller saw part of ends here.
	cut := p.reply.Outcome.Class != ClassSuccess && w.workCtx.Err() != nil && !partial
	e := event{Step: stepCalled, Outcome: p.reply.Outcome}
	if a.incident != nil && !cut {
		// Told first: the calls about to start learn of an outage at once.
		e.Outage, e.OutageFor = a.incident.done(w.cfg.Clock.Now(), a.probe, resultOf(p.reply.Outcome))
	}
	w.metrics.inFlight.Dec()
	p.attempt.answer(p.reply, w.cfg.Clock.Now())
	if w.workCtx.Err() == nil {
		l.observeHealth(p.reply.Outcome, w.cfg.Clock.Since(begin))
	}
	w.settle(permit, l, p.rec.Tenant, p.reply)
	a.releaseScopes()
	w.countScopes(p.scopes, p.reply)
	w.endBudget(p, model, &p.reply)
	if cut {
		a.notCalled()
		w.release(p)
		return event{}, false
	}
	p.setPending(l)
	return e, true
}

// markTimeout bounds the record of a call.
const markTimeout = 30 * time.Second

// stored is the policy state kept with the job.
func (s state) stored() store.PolicyState {
	return store.PolicyState{Retries: s.Retries, ModelIndex: s.Model, RateLimited: s.RateLimited, FreeAttempts: s.Free}
}

// admit waits in lane l: priority order first, then shaping, no longer
// than act.Deadline. The lane predicts waits on the worker's clock;
// the deadline's timer is the system clock's, as a job's deadline is wall
// time.
func (w *Worker) admit(p *job, l *lane, act action) (admission, error) {
	ctx := p.ctx
	if !act.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, act.Deadline)
		defer cancel()
	}
	begin := w.cfg.Clock.Now()
	t := &ticket{ctx: ctx, req: p.req, scopes: p.scopes, maxPause: act.MaxPause, done: make(chan admission, 1)}
	l.sched.Push(t, p.job.Priority.Rank())
	a := t.wait(ctx)
	a.waited = w.cfg.Clock.Since(begin)
	tracing.Observe(p.trace.Context(p.ctx), w.metrics.shapingWait, a.waited.Seconds())
	if a.err != nil && !act.Deadline.IsZero() && errors.Is(a.err, context.DeadlineExceeded) && context.Cause(ctx) == context.DeadlineExceeded {
		return admission{}, &shaping.WaitError{Deadline: act.Deadline}
	}
	return a, a.err
}

// model returns the catalog entry of a model, as its lane sees it.
func (w *Worker) model(name string) llmq.Model { return laneModel(w.catalog(), name) }

func isWaitError(err error) bool {
	var we *shaping.WaitError
	return errors.As(err, &we)
}

// settle gives lane l the outcome of one call and counts it. A
// Retry-After is capped at Backoff.MaxRetryAfter for the lane's pause as
// for the job's backoff.
func (w *Worker) settle(permit shaping.Permit, l *lane, tenant string, reply Reply) {
	model := l.model
	out := reply.Outcome
	code := "error"
	if out.Status > 0 {
		code = strconv.Itoa(out.Status)
	}
	w.metrics.upstream.WithLabelValues(model, l.entry, code).Inc()
	so := shaping.Outcome{
		RateLimited: out.Class == ClassRateLimited,
		Overloaded:  out.Status == 503 || out.Code == "timeout",
		Headers:     out.Headers,
	}
	so.Headers.RetryAfter = min(so.Headers.RetryAfter, w.cfg.Backoff.MaxRetryAfter)
	// A streamed call cut short (stream.go) is charged what it used.
	if out.Class == ClassSuccess || reply.PromptTokens+reply.CompletionTokens > 0 {
		so.PromptTokens, so.CompletionTokens = reply.PromptTokens, reply.CompletionTokens
		w.metrics.tokens.WithLabelValues(model, "prompt").Add(float64(reply.PromptTokens))
		w.metrics.tokens.WithLabelValues(model, "completion").Add(float64(reply.CompletionTokens))
		w.metrics.tenantTokens.WithLabelValues(w.tenantLabel(tenant)).Add(float64(reply.PromptTokens + reply.CompletionTokens))
	}
	if out.Class == ClassSuccess {
		w.policyMu.Lock()
		w.budget.Deposit()
		w.policyMu.Unlock()
	}
	if err := permit.Done(so); err != nil {
		w.log.Error("settle permit", slog.Any("error", err))
	}
	// The answer may have widened what the lane admits (its headers, a
	// staged burst's canary): claim now, not after this job is stored.
	w.poke()
}

// backoff records the retryable failure and waits delay, holding the lease
// (the heartbeat renews it). It reports false when the job left the
// pipeline (handed back at shutdown, lease lost, or finished elsewhere).
func (w *Worker) backoff(p *job, delay time.Duration) bool {
	out := p.reply.Outcome
	st := p.state.stored()
	st.Answered = p.attempt.answered
	err := w.durable(p, w.workCtx, "mark retrying", func(ctx context.Context) error {
		return w.cfg.Store.MarkRetrying(ctx, p.lease, st, clean(out.Code), clean(out.Message))
	})
	if err != nil {
		return false
	}
	p.attempt.answered, p.attempt.backoff = nil, delay
	w.metrics.jobs.WithLabelValues(string(llmq.StatusRetrying)).Inc()
	p.log.Debug("retrying", slog.String("code", out.Code), slog.Duration("delay", delay), slog.Int("calls", p.state.Attempts))
	if err := sleep(p.ctx, w.cfg.Clock, delay); err != nil {
		w.leave(p)
		return false
	}
	return true
}

// succeed stores the upstream's answer until it lands: a paid answer is
// never thrown away. Only the job being terminal elsewhere, a result
// Postgres cannot hold (the job fails with the reason) or the end of the
// shutdown grace period stop the retries.
func (w *Worker) succeed(p *job) {
	model, reply := p.models[p.state.Model], p.reply
	w.est.Observe(model, p.req.PromptTokens, reply.PromptTokens)
	res := store.Result{
		Response: reply.Body, UsedModel: model, CostUSD: w.priced(p, model).Cost(reply.PromptTokens, reply.CompletionTokens),
		PromptTokens: reply.PromptTokens, CompletionTokens: reply.CompletionTokens, Answered: p.attempt.answered,
	}
	var stored bool
	err := w.durable(p, w.workCtx, "store result", func(ctx context.Context) (err error) {
		stored, err = w.cfg.Store.StoreResult(ctx, p.lease.Key, res)
		return err
	})
	var ite *store.IllegalTransitionError
	switch {
	case err == nil && !stored:
		p.log.Info("answer not stored: the job succeeded already")
		w.finish(p, llmq.StatusSucceeded)
	case err == nil:
		w.finish(p, llmq.StatusSucceeded)
	case errors.Is(err, store.ErrInvalidJob):
		w.fail(p, 0, "result_unstorable", err.Error())
	case errors.As(err, &ite):
		p.log.Warn("answer not stored: the job ended otherwise", slog.String("status", string(ite.From)))
	default:
		p.log.Error("ANSWER NOT STORED: the database stayed unreachable until shutdown; the job will be called again",
			slog.String("key", p.lease.String()), slog.Any("error", err))
	}
}

// fail ends p as failed with code and msg; status is the upstream's HTTP
// status, 0 for a failure of llmq's own.
func (w *Worker) fail(p *job, status int, code, msg string) {
	w.end(p, llmq.StatusFailed, code+": "+msg, func(ctx context.Context) error {
		return w.cfg.Store.MarkFailed(ctx, p.lease, status, clean(code), clean(msg))
	})
}

// end makes the terminal write of status, retried on database errors.
func (w *Worker) end(p *job, status llmq.Status, why string, write func(ctx context.Context) error) {
	w.flushAnswer(p)
	if err := w.durable(p, w.workCtx, "mark "+string(status), write); err != nil {
		return
	}
	p.log.Info("job "+string(status), slog.String("why", why))
	w.finish(p, status)
}

// deadLetter hands p to the dead-letter writer, which records the letter
// (with lastError) and ends the job in one transaction, fenced to p's
// lease, then publishes it.
func (w *Worker) deadLetter(p *job, reason dlq.Reason, lastError string) {
	w.flushAnswer(p)
	value, err := p.job.Encode()
	if err != nil {
		w.fail(p, 0, "invalid_body", err.Error())
		return
	}
	l := dlq.Letter{
		JobID: p.job.ID, Tenant: p.job.Tenant, Reason: reason, Attempts: p.state.Attempts,
		LastError: clean(lastError), Message: value, Key: []byte(p.job.ID), Source: "jobs/" + p.lease.String(),
		At: w.cfg.Clock.Now(), LeaseToken: p.lease.Token,
	}
	if p.state.Model < len(p.models) {
		l.Model = p.models[p.state.Model]
	}
	if err := w.durable(p, w.workCtx, "dead-letter", func(ctx context.Context) error {
		return w.cfg.DeadLetters.DeadLetter(ctx, l)
	}); err != nil {
		return
	}
	w.metrics.deadLetters.WithLabelValues(string(reason)).Inc()
	p.log.Warn("job dead-lettered", slog.String("reason", string(reason)), slog.String("last_error", l.LastError))
	w.finish(p, llmq.StatusDeadLettered)
}

// durableWrite runs write until it succeeds, retrying database (and broker)
// errors with a growing pause on the worker's clock until ctx ends. It
// returns nil, or the error that ended it: the job gone from this worker
// (logged by gone), a permanent error, or the last error when ctx ended.
func (w *Worker) durableWrite(p *job, ctx context.Context, what string, write func(ctx context.Context) error) error {
	for {
		err := write(ctx)
		if err == nil {
			p.writeFails = 0
			return nil
		}
		if errors.Is(err, store.ErrInvalidJob) {
			if what != "store result" {
				p.log.Error(what+": Postgres refuses it", slog.Any("error", err))
			}
			return err
		}
		if w.gone(p, what, err) {
			return err
		}
		if p.writeFails == 0 {
			p.log.Warn(what+": retrying", slog.Any("error", err))
		}
		d := retryDelay(p.writeFails, w.cfg.StoreRetryMax)
		p.writeFails++
		if sleep(ctx, w.cfg.Clock, d) != nil {
			p.log.Warn(what+": given up at shutdown", slog.Any("error", err))
			return err
		}
	}
}

// gone reports an error that says the job is no longer this worker's to
// change (lease lost, finished elsewhere, deleted), logging why.
func (w *Worker) gone(p *job, what string, err error) bool {
	var ite *store.IllegalTransitionError
	switch {
	case errors.Is(err, store.ErrLeaseLost):
		w.metrics.leaseLost.Inc()
		p.log.Info(what+": the lease was taken over; leaving the job", slog.Any("error", err))
	case errors.As(err, &ite):
		p.log.Info(what+": the job ended otherwise", slog.String("status", string(ite.From)))
	case errors.Is(err, store.ErrNotFound):
		p.log.Warn(what+": the job is gone", slog.Any("error", err))
	default:
		return false
	}
	return true
}

// pause waits before p tries a failed write again; false when the job left
// the pipeline meanwhile.
func (w *Worker) pause(p *job) bool {
	if p.writeFails == 0 {
		p.log.Warn("database unreachable; retrying")
	}
	d := retryDelay(p.writeFails, w.cfg.StoreRetryMax)
	p.writeFails++
	if err := sleep(p.ctx, w.cfg.Clock, d); err != nil {
		w.leave(p)
		return false
	}
	return true
}

// leave ends a wait cut by p's context: at shutdown the job is handed
// back; when its lease was lost it is left as it is (another worker has
// it, or will).
func (w *Worker) leave(p *job) {
	if errors.Is(context.Cause(p.ctx), errLeaseLost) {
		w.metrics.leaseLost.Inc()
		p.log.Info("lease lost while waiting; leaving the job")
		return
	}
	w.release(p)
}

// release hands p back to queued (fenced): another claim will take it.
func (w *Worker) release(p *job) {
	w.flushAnswer(p)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), 5*time.Second)
	defer cancel()
	if err := w.cfg.Store.Release(ctx, p.lease); err != nil && !w.gone(p, "release", err) {
		// Its lease will expire and the reaper hand it back.
		p.log.Warn("release", slog.Any("error", err))
	}
	w.metrics.released.Inc()
	if errors.Is(context.Cause(p.ctx), errShutdown) {
		w.handedBack.Add(1)
	}
}

// finish counts a terminal job.
func (w *Worker) finish(p *job, status llmq.Status) {
	p.trace.Finished(string(status))
	w.metrics.jobs.WithLabelValues(string(status)).Inc()
	tracing.Observe(p.trace.Context(p.ctx), w.metrics.jobDuration, w.cfg.Clock.Since(p.start).Seconds())
}

// clean drops the NUL characters Postgres text cannot hold. (An upstream's
// text is sanitised and bounded already: Classify.)
func clean(s string) string { return strings.ReplaceAll(s, "\x00", "") }
