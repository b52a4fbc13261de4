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
	// first is the timeline of the job's first call while it goes there
	// (nil: the job was called before, or its call is recorded).
	first *firstCall
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

// start runs the claimed job rec, whose claim's times are at, in a
// goroutine of its own.
func (c *caller) start(rec *store.JobRecord, at claimTimes) {
	p := &job{rec: rec, lease: rec.Lease(), start: c.cfg.Clock.Now(),
		log: c.cfg.Log.With(slog.String("job_id", rec.ID), slog.String("tenant", rec.Tenant))}
	if rec.Attempts == 0 {
		p.first = &firstCall{claimTimes: at}
	}
	p.ctx, p.cancel = context.WithCancelCause(c.stopCtx)
	c.inFlight.Add(1)
	c.cfg.Metrics.claimed.Inc()
	c.cfg.Leases.register(p)
	// A job recorded by another path (the producer's outbox, an older
	// configuration) may name a model the catalog does not allow: it is
	// dead-lettered without a lane.
	p.job = rec.Job()
	c.traceStart(p, rec)
	p.scopes = c.cfg.Scopes.scopesOf(rec.Tenant, rec.Project)
	refused := c.cfg.Catalog().CheckModels(p.job)
	var l *lane
	if len(refused) == 0 {
		l = c.cfg.Lanes.lane(rec.RequestedModel)
		// As the claim counted it (a job recorded without an estimate as
		// the lane's typical one) until prepare estimates it.
		p.tokens = int64(rec.EstPromptTokens + rec.EstOutputTokens)
		if p.tokens == 0 {
			p.tokens = int64(l.typical().MaxOutputTokens)
		}
		p.setPending(cmp.Or(c.cfg.Lanes.unboundOf(rec.RequestedModel), l))
	}
	c.runners.Add(1)
	go func() {
		defer func() {
			p.trace.End()
			p.setPending(nil)
			p.cancel(nil)
			c.cfg.Leases.unregister(p)
			c.inFlight.Add(-1)
			c.runners.Done()
			c.cfg.Wake()
		}()
		switch {
		case len(refused) > 0:
			c.deadLetter(p, dlq.ReasonModelNotAllowed, notAllowed(refused))
		case c.prepare(p, l):
			c.run(p)
		}
	}()
}

// prepare rebuilds the job from its record: its model chain, the admission
// request (from the ingest estimate, or estimated now) and the policy's
// state as the last holder left it. A body that no longer parses fails the
// job.
func (c *caller) prepare(p *job, l *lane) bool {
	p.models = c.cfg.Catalog().Chain(p.job)
	prompt, out := p.rec.EstPromptTokens, p.rec.EstOutputTokens
	if prompt == 0 && out == 0 {
		// Recorded by the producer or the API: estimated here, once.
		est, err := c.cfg.Estimator.EstimateBody(p.job.Body)
		if err != nil {
			c.fail(p, 0, "invalid_body", err.Error())
			return false
		}
		prompt, out = est.PromptTokens, cmp.Or(est.MaxOutputTokens, est.N*laneModel(c.cfg.Catalog(), p.job.Model()).MaxOutputDefault)
	}
	safe := int(float64(prompt)*c.cfg.Estimator.Safety(p.job.Model()) + 0.999)
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
func (c *caller) run(p *job) {
	e := event{Step: stepReady}
	for {
		from := p.state.Model
		act := c.decide(p, e)
		switch act.Verb {
		case doCall:
			var ok bool
			if e, ok = c.call(p, act); !ok {
				return
			}
		case doRetry:
			c.cfg.Metrics.retries.WithLabelValues(p.models[p.state.Model]).Inc()
			p.trace.Event("retry", attribute.Float64("llmq.delay_s", act.Delay.Seconds()))
			if !c.backoff(p, act.Delay) {
				return
			}
			e = event{Step: stepReady}
		case doSwitchEntry:
			model, from := p.models[p.state.Model], c.cfg.Lanes.entryName(p, p.models[p.state.Model])
			p.left |= 1 << p.entry
			p.entry = act.Entry
			to := c.cfg.Lanes.entryName(p, model)
			c.cfg.Metrics.entrySwitches.WithLabelValues(model, from, to).Inc()
			p.trace.Event("pool_entry_switch", attribute.String("llmq.from", from), attribute.String("llmq.to", to))
			p.log.Info("moving to another key of the pool", slog.String("model", model), slog.String("from", from),
				slog.String("to", to), slog.String("why", act.Why))
			e = event{Step: stepReady}
		case doFallBack:
			p.entry, p.left = -1, 0
			to := p.models[p.state.Model]
			c.cfg.Metrics.fallbacks.WithLabelValues(p.models[from], to).Inc()
			p.trace.Event("fallback", attribute.String("llmq.from", p.models[from]), attribute.String("llmq.to", to))
			p.log.Info("falling back", slog.String("from", p.models[from]), slog.String("to", to), slog.String("why", act.Why))
			e = event{Step: stepReady}
		case doSucceed:
			c.succeed(p)
			return
		case doFail:
			c.fail(p, act.Status, act.Code, act.Message)
			return
		case doExpire:
			c.end(p, llmq.StatusExpired, act.Why, func(ctx context.Context) error {
				return c.cfg.Store.MarkExpired(ctx, p.lease, act.Why)
			})
			return
		case doDeadLetter:
			c.deadLetter(p, act.Reason, p.reply.Outcome.Code+": "+p.reply.Outcome.Message)
			return
		case doHandBack:
			p.log.Info("job handed back", slog.String("why", act.Why))
			c.release(p)
			return
		}
	}
}

// decide gives the policy p's step e with the facts only the worker knows,
// keeps the new state and returns the action. The retry budget and the
// jitter source are shared by every job: the decision and the budget's
// withdrawal happen under one lock.
func (c *caller) decide(p *job, e event) action {
	e.Now = c.cfg.Clock.Now()
	if p.job.Deadline != nil {
		e.Deadline = *p.job.Deadline
	}
	if e.Step == stepCalled && p.state.Model > 0 && isNotFound(e.Outcome) {
		c.unserved.mark(p.models[p.state.Model], e.Now)
	}
	e.Next = nextFallback(c.cfg.Catalog(), p.models, p.state.Model, shaping.Estimate{
		PromptTokens: p.req.PromptTokens, MaxOutputTokens: p.req.MaxOutputTokens},
		func(model string) bool { return c.unserved.has(model, e.Now) })
	if model := p.models[p.state.Model]; len(c.cfg.Lanes.pool(model)) > 1 {
		e.Pooled = true
		// Only where the policy may move the job: the check may read the
		// budgets.
		if e.Step == stepLanePaused || e.Step == stepCalled && e.Outcome.Class != ClassSuccess && e.Outcome.Class != ClassPermanent {
			e.Entry = c.cfg.Lanes.nextEntry(p, model)
		}
	}
	c.policyMu.Lock()
	e.BudgetLeft = c.cfg.RetryBudget.Available()
	next, act := c.cfg.Policy.decide(p.state, e, c.rng)
	if act.Budgeted {
		c.cfg.RetryBudget.Withdraw()
	}
	c.policyMu.Unlock()
	p.state = next
	return act
}

// call waits for admission in the lane of p's current model, records the
// call and makes it. It returns the step that came of it, or false when the
// job left the pipeline on the way.
func (c *caller) call(p *job, act action) (event, bool) {
	model := p.models[p.state.Model]
	if p.entry < 0 {
		p.entry = c.cfg.Lanes.pickEntry(p, model)
	}
	l := c.cfg.Lanes.laneAt(model, p.entry)
	a, ev, stay, ok := c.admitCall(p, model, l, act)
	if !ok {
		return ev, stay
	}
	body, ev, stay, ok := c.callBody(p, model, &a)
	if !ok {
		return ev, stay
	}
	if ev, stay, ok := c.markCalling(p, model, l, &a); !ok {
		return ev, stay
	}
	return c.makeCall(p, model, l, &a, body)
}

// admitCall waits for admission in lane l. Without one (ok false) it
// returns the step that came of it, or false when the job left.
func (c *caller) admitCall(p *job, model string, l *lane, act action) (_ admission, _ event, stay, ok bool) {
	p.setPending(l)
	ws := p.trace.Child(tracing.SpanQuotaWait)
	a, err := c.admit(p, l, act)
	endQuotaWait(ws, model, a, err)
	switch {
	case errors.Is(err, errLanePaused):
		return a, event{Step: stepLanePaused}, true, false
	case errors.Is(err, errLaneUnshared):
		p.log.Info("job handed back", slog.String("why", err.Error()))
		c.release(p)
		return a, event{}, false, false
	case errors.Is(err, shaping.ErrTooLarge):
		return a, event{Step: stepTooLarge, Detail: err.Error()}, true, false
	case isWaitError(err):
		return a, event{Step: stepWaitTooLong, Detail: err.Error()}, true, false
	case err != nil:
		c.leave(p)
		return a, event{}, false, false
	}
	return a, event{}, false, true
}

// callBody is the body of the call to model, after the budget gate; when
// the call is not made (ok false) the admission is given back.
func (c *caller) callBody(p *job, model string, a *admission) (_ json.RawMessage, _ event, stay, ok bool) {
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
			c.fail(p, 0, "invalid_body", err.Error())
			return nil, event{}, false, false
		}
	}
	body, ev, stay, proceed := c.budgets.gate(p, model, body)
	if !proceed {
		permit.Cancel()
		a.notCalled()
		return nil, ev, stay, false
	}
	return body, event{}, false, true
}

// markCalling records the call. When the record fails (ok false) the
// admission and the budget go back, and the job is admitted again or left.
func (c *caller) markCalling(p *job, model string, l *lane, a *admission) (_ event, stay, ok bool) {
	// Recorded on a context Stop does not cut: once the call is recorded
	// it is made (a call in flight finishes at shutdown); a lease lost
	// meanwhile fails the record, fenced.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), markTimeout)
	called := c.cfg.Clock.Now()
	attempts, err := c.cfg.Store.MarkCalling(mctx, p.lease, p.attempt.call(p.state.stored(), model, l.entry, a.waited))
	cancel()
	if err != nil {
		permit := a.permit
		c.budgets.end(p, model, nil)
		permit.Cancel()
		a.notCalled()
		a.releaseScopes()
		if c.gone(p, "mark calling", err) || !c.pause(p) {
			return event{}, false, false
		}
		return event{Step: stepReady}, true, false // admitted again, then recorded
	}
	p.writeFails = 0
	p.left = 0
	p.attempt.called(attempts)
	if p.first != nil {
		p.first.observe(c.cfg.Metrics.firstCallStage, p.rec.CreatedAt, called)
		p.first = nil
	}
	// The call is counted before it starts: the policy counts it again
	// when it answers.
	p.state.Attempts = attempts - 1 - p.state.Free
	return event{}, false, true
}

// makeCall makes the recorded call and settles it: the lane, the scopes
// and the budget. It returns the step, or false when shutdown cut it.
func (c *caller) makeCall(p *job, model string, l *lane, a *admission, body json.RawMessage) (event, bool) {
	permit := a.permit
	p.setPending(nil)
	c.cfg.Metrics.inFlight.Inc()
	begin := c.cfg.Clock.Now()
	cs := p.trace.Child(tracing.SpanCall)
	ctx, sink := c.streamTo(withCallOf(p.trace.Context(c.workCtx), p.rec.Tenant, p.rec.ID), p)
	p.reply = l.up.Call(ctx, model, body)
	partial := sink.finish(&p.reply, p.req.PromptTokens)
	endCall(cs, p, model, c.cfg.Lanes.entryName(p, model))
	// A call cut by shutdown, not by the upstream (an answer that arrived
	// is stored all the same); a stream the caller saw part of ends here.
	cut := p.reply.Outcome.Class != ClassSuccess && c.workCtx.Err() != nil && !partial
	e := event{Step: stepCalled, Outcome: p.reply.Outcome}
	if a.incident != nil && !cut {
		// Told first: the calls about to start learn of an outage at once.
		e.Outage, e.OutageFor = a.incident.done(c.cfg.Clock.Now(), a.probe, resultOf(p.reply.Outcome))
	}
	c.cfg.Metrics.inFlight.Dec()
	p.attempt.answer(p.reply, c.cfg.Clock.Now())
	if c.workCtx.Err() == nil {
		l.observeHealth(p.reply.Outcome, c.cfg.Clock.Since(begin))
	}
	c.settle(permit, l, p.rec.Tenant, p.reply)
	a.releaseScopes()
	c.cfg.Scopes.countScopes(p.scopes, p.reply)
	c.budgets.end(p, model, &p.reply)
	if cut {
		a.notCalled()
		c.release(p)
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
func (c *caller) admit(p *job, l *lane, act action) (admission, error) {
	ctx := p.ctx
	if !act.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, act.Deadline)
		defer cancel()
	}
	begin := c.cfg.Clock.Now()
	t := &ticket{ctx: ctx, req: p.req, scopes: p.scopes, maxPause: act.MaxPause, done: make(chan admission, 1)}
	l.sched.Push(t, p.job.Priority.Rank())
	a := t.wait(ctx)
	end := c.cfg.Clock.Now()
	a.waited = end.Sub(begin)
	if p.first != nil {
		p.first.queued, p.first.admitted = begin, end
	}
	tracing.Observe(p.trace.Context(p.ctx), c.cfg.Metrics.shapingWait, a.waited.Seconds())
	if a.err != nil && !act.Deadline.IsZero() && errors.Is(a.err, context.DeadlineExceeded) && context.Cause(ctx) == context.DeadlineExceeded {
		return admission{}, &shaping.WaitError{Deadline: act.Deadline}
	}
	return a, a.err
}

func isWaitError(err error) bool {
	var we *shaping.WaitError
	return errors.As(err, &we)
}

// settle gives lane l the outcome of one call and counts it. A
// Retry-After is capped at Backoff.MaxRetryAfter for the lane's pause as
// for the job's backoff.
func (c *caller) settle(permit shaping.Permit, l *lane, tenant string, reply Reply) {
	model := l.model
	out := reply.Outcome
	code := "error"
	if out.Status > 0 {
		code = strconv.Itoa(out.Status)
	}
	c.cfg.Metrics.upstream.WithLabelValues(model, l.entry, code).Inc()
	so := shaping.Outcome{
		RateLimited: out.Class == ClassRateLimited,
		Overloaded:  out.Status == 503 || out.Code == "timeout",
		Headers:     out.Headers,
	}
	so.Headers.RetryAfter = min(so.Headers.RetryAfter, c.cfg.MaxRetryAfter)
	// A streamed call cut short (stream.go) is charged what it used.
	if out.Class == ClassSuccess || reply.PromptTokens+reply.CompletionTokens > 0 {
		so.PromptTokens, so.CompletionTokens = reply.PromptTokens, reply.CompletionTokens
		c.cfg.Metrics.tokens.WithLabelValues(model, "prompt").Add(float64(reply.PromptTokens))
		c.cfg.Metrics.tokens.WithLabelValues(model, "completion").Add(float64(reply.CompletionTokens))
		c.cfg.Metrics.tenantTokens.WithLabelValues(c.cfg.TenantLabel(tenant)).Add(float64(reply.PromptTokens + reply.CompletionTokens))
	}
	if out.Class == ClassSuccess {
		c.policyMu.Lock()
		c.cfg.RetryBudget.Deposit()
		c.policyMu.Unlock()
	}
	if err := permit.Done(so); err != nil {
		c.cfg.Log.Error("settle permit", slog.Any("error", err))
	}
	// The answer may have widened what the lane admits (its headers, a
	// staged burst's canary): claim now, not after this job is stored.
	c.cfg.Wake()
}

// backoff records the retryable failure and waits delay, holding the lease
// (the heartbeat renews it). It reports false when the job left the
// pipeline (handed back at shutdown, lease lost, or finished elsewhere).
func (c *caller) backoff(p *job, delay time.Duration) bool {
	out := p.reply.Outcome
	st := p.state.stored()
	st.Answered = p.attempt.answered
	err := c.durable(p, c.workCtx, "mark retrying", func(ctx context.Context) error {
		return c.cfg.Store.MarkRetrying(ctx, p.lease, st, clean(out.Code), clean(out.Message))
	})
	if err != nil {
		return false
	}
	p.attempt.answered, p.attempt.backoff = nil, delay
	c.cfg.Metrics.jobs.WithLabelValues(string(llmq.StatusRetrying)).Inc()
	p.log.Debug("retrying", slog.String("code", out.Code), slog.Duration("delay", delay), slog.Int("calls", p.state.Attempts))
	if err := sleep(p.ctx, c.cfg.Clock, delay); err != nil {
		c.leave(p)
		return false
	}
	return true
}

// succeed stores the upstream's answer until it lands: a paid answer is
// never thrown away. Only the job being terminal elsewhere, a result
// Postgres cannot hold (the job fails with the reason) or the end of the
// shutdown grace period stop the retries.
func (c *caller) succeed(p *job) {
	model, reply := p.models[p.state.Model], p.reply
	c.cfg.Estimator.Observe(model, p.req.PromptTokens, reply.PromptTokens)
	res := store.Result{
		Response: reply.Body, UsedModel: model, CostUSD: c.cfg.Lanes.priced(p, model).Cost(reply.PromptTokens, reply.CompletionTokens),
		PromptTokens: reply.PromptTokens, CompletionTokens: reply.CompletionTokens, Answered: p.attempt.answered,
	}
	var stored bool
	err := c.durable(p, c.workCtx, "store result", func(ctx context.Context) (err error) {
		stored, err = c.cfg.Store.StoreResult(ctx, p.lease.Key, res)
		return err
	})
	var ite *store.IllegalTransitionError
	switch {
	case err == nil && !stored:
		p.log.Info("answer not stored: the job succeeded already")
		c.finish(p, llmq.StatusSucceeded)
	case err == nil:
		c.finish(p, llmq.StatusSucceeded)
	case errors.Is(err, store.ErrInvalidJob):
		c.fail(p, 0, "result_unstorable", err.Error())
	case errors.As(err, &ite):
		p.log.Warn("answer not stored: the job ended otherwise", slog.String("status", string(ite.From)))
	default:
		p.log.Error("ANSWER NOT STORED: the database stayed unreachable until shutdown; the job will be called again",
			slog.String("key", p.lease.String()), slog.Any("error", err))
	}
}

// fail ends p as failed with code and msg; status is the upstream's HTTP
// status, 0 for a failure of llmq's own.
func (c *caller) fail(p *job, status int, code, msg string) {
	c.end(p, llmq.StatusFailed, code+": "+msg, func(ctx context.Context) error {
		return c.cfg.Store.MarkFailed(ctx, p.lease, status, clean(code), clean(msg))
	})
}

// end makes the terminal write of status, retried on database errors.
func (c *caller) end(p *job, status llmq.Status, why string, write func(ctx context.Context) error) {
	c.flushAnswer(p)
	if err := c.durable(p, c.workCtx, "mark "+string(status), write); err != nil {
		return
	}
	p.log.Info("job "+string(status), slog.String("why", why))
	c.finish(p, status)
}

// deadLetter hands p to the dead-letter writer, which records the letter
// (with lastError) and ends the job in one transaction, fenced to p's
// lease, then publishes it.
func (c *caller) deadLetter(p *job, reason dlq.Reason, lastError string) {
	c.flushAnswer(p)
	value, err := p.job.Encode()
	if err != nil {
		c.fail(p, 0, "invalid_body", err.Error())
		return
	}
	l := dlq.Letter{
		JobID: p.job.ID, Tenant: p.job.Tenant, Reason: reason, Attempts: p.state.Attempts,
		LastError: clean(lastError), Message: value, Key: []byte(p.job.ID), Source: "jobs/" + p.lease.String(),
		At: c.cfg.Clock.Now(), LeaseToken: p.lease.Token,
	}
	if p.state.Model < len(p.models) {
		l.Model = p.models[p.state.Model]
	}
	if err := c.durable(p, c.workCtx, "dead-letter", func(ctx context.Context) error {
		return c.cfg.DeadLetters.DeadLetter(ctx, l)
	}); err != nil {
		return
	}
	c.cfg.Metrics.deadLetters.WithLabelValues(string(reason)).Inc()
	p.log.Warn("job dead-lettered", slog.String("reason", string(reason)), slog.String("last_error", l.LastError))
	c.finish(p, llmq.StatusDeadLettered)
}

// durableWrite runs write until it succeeds, retrying database (and broker)
// errors with a growing pause on the worker's clock until ctx ends. It
// returns nil, or the error that ended it: the job gone from this worker
// (logged by gone), a permanent error, or the last error when ctx ended.
func (c *caller) durableWrite(p *job, ctx context.Context, what string, write func(ctx context.Context) error) error {
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
		if c.gone(p, what, err) {
			return err
		}
		if p.writeFails == 0 {
			p.log.Warn(what+": retrying", slog.Any("error", err))
		}
		d := retryDelay(p.writeFails, c.cfg.StoreRetryMax)
		p.writeFails++
		if sleep(ctx, c.cfg.Clock, d) != nil {
			p.log.Warn(what+": given up at shutdown", slog.Any("error", err))
			return err
		}
	}
}

// gone reports an error that says the job is no longer this worker's to
// change (lease lost, finished elsewhere, deleted), logging why.
func (c *caller) gone(p *job, what string, err error) bool {
	var ite *store.IllegalTransitionError
	switch {
	case errors.Is(err, store.ErrLeaseLost):
		c.cfg.Metrics.leaseLost.Inc()
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
func (c *caller) pause(p *job) bool {
	if p.writeFails == 0 {
		p.log.Warn("database unreachable; retrying")
	}
	d := retryDelay(p.writeFails, c.cfg.StoreRetryMax)
	p.writeFails++
	if err := sleep(p.ctx, c.cfg.Clock, d); err != nil {
		c.leave(p)
		return false
	}
	return true
}

// leave ends a wait cut by p's context: at shutdown the job is handed
// back; when its lease was lost it is left as it is (another worker has
// it, or will).
func (c *caller) leave(p *job) {
	if errors.Is(context.Cause(p.ctx), errLeaseLost) {
		c.cfg.Metrics.leaseLost.Inc()
		p.log.Info("lease lost while waiting; leaving the job")
		return
	}
	c.release(p)
}

// release hands p back to queued (fenced): another claim will take it.
func (c *caller) release(p *job) {
	c.flushAnswer(p)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), 5*time.Second)
	defer cancel()
	if err := c.cfg.Store.Release(ctx, p.lease); err != nil && !c.gone(p, "release", err) {
		// Its lease will expire and the reaper hand it back.
		p.log.Warn("release", slog.Any("error", err))
	}
	c.cfg.Metrics.released.Inc()
	if errors.Is(context.Cause(p.ctx), errShutdown) {
		c.handedBack.Add(1)
	}
}

// finish counts a terminal job, and tells Routed when it has a route.
func (c *caller) finish(p *job, status llmq.Status) {
	if p.rec.Reply != nil {
		c.cfg.Routed()
	}
	p.trace.Finished(string(status))
	c.cfg.Metrics.jobs.WithLabelValues(string(status)).Inc()
	tracing.Observe(p.trace.Context(p.ctx), c.cfg.Metrics.jobDuration, c.cfg.Clock.Since(p.start).Seconds())
}

// clean drops the NUL characters Postgres text cannot hold. (An upstream's
// text is sanitised and bounded already: Classify.)
func clean(s string) string { return strings.ReplaceAll(s, "\x00", "") }
