package worker

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/shaping"
)

// The worker's policy is one pure function, policy.decide: from a job's
// state and the step it just took, the state after the step and what to do
// next. The pipeline (run in worker.go) only performs the actions.
// docs/worker-policy.md has the decision table.

// state is what the policy remembers of one job between its steps. It is
// plain data, kept with the job in Postgres (attempts by MarkCalling before
// each call, the rest with it and MarkRetrying), so a job claimed again
// goes on where the last holder stopped.
type state struct {
	// Attempts counts the upstream calls made, fallbacks included, but
	// the free ones: those max_attempts bounds.
	Attempts int
	// Free counts the calls that cost the job no attempt (policy.free).
	Free int
	// Retries counts the backoff waits taken; it sizes the next jitter
	// window.
	Retries int
	// Model is the index, in the job's model chain, of the model it is on.
	Model int
	// RateLimited counts the failures of the current model that may move
	// the job to a fallback (policy.FallbackOn: 429s by default).
	RateLimited int
}

// step is what just happened to a job: the question a decision answers.
type step int

const (
	// stepReady: the job is about to ask its model's lane for admission
	// (when it starts, after a fallback and after a backoff).
	stepReady step = iota
	// stepLanePaused: the lane would hold the admission longer than its
	// MaxPause (a 429 pause, or buckets drained by this worker's calls or
	// another client's).
	stepLanePaused
	// stepTooLarge: the request can never fit the lane's buckets.
	stepTooLarge
	// stepWaitTooLong: the predicted admission passes the deadline.
	stepWaitTooLong
	// stepCalled: an upstream call came back.
	stepCalled
)

// event is one step of a job with every fact the decision reads besides
// the job's state and the policy's settings.
type event struct {
	Step step
	// Now is the worker's clock at the step.
	Now time.Time
	// Deadline is the job's deadline; zero when it has none.
	Deadline time.Time
	// Next is the index in the chain of the first model after the current
	// one whose context window holds the request and that the provider
	// serves, as far as the worker knows (nextFallback); 0 when there is
	// none.
	Next int
	// Outcome is the classified reply of the call (stepCalled).
	Outcome Outcome
	// BudgetLeft reports whether the retry budget has a retry to give
	// (stepCalled).
	BudgetLeft bool
	// Detail is the admission's error message (stepTooLarge,
	// stepWaitTooLong).
	Detail string
	// Pooled says the current model has a pool of more than one key
	// (pool.go); Entry is 1 + the entry the job may move to (one with
	// capability, quota and budget for it, nextEntry), 0 when none
	// (stepLanePaused, and stepCalled after a failure).
	Pooled bool
	Entry  int
	// Outage says the call failed for the provider, not for the job (no
	// answer, a 401, a failed probe: incident.done), in an outage that
	// has lasted OutageFor (stepCalled).
	Outage    bool
	OutageFor time.Duration
}

// verb is what the pipeline does next with a job.
type verb int

const (
	// doCall: wait for admission in the current model's lane (no longer
	// than Deadline; leaving a lane that would hold it longer than MaxPause),
	// then call.
	doCall verb = iota
	// doRetry: record the failure (retrying), wait Delay holding the lease,
	// and go on from stepReady on the same model. Budgeted: take the
	// retry from the budget.
	doRetry
	// doFallBack: the state is on the next model now; go on from stepReady
	// at once.
	doFallBack
	// doSwitchEntry: move to the entry Entry of the model's key pool and
	// go on from stepReady at once.
	doSwitchEntry
	// doSucceed: store the reply as the result.
	doSucceed
	// doFail: record the permanent failure Code, Message.
	doFail
	// doExpire: record the job expired (Why).
	doExpire
	// doDeadLetter: dead-letter the job with Reason.
	doDeadLetter
	// doHandBack: release the claim: the job goes back to queued (Why).
	doHandBack
)

// action is a decision: a verb and what performing it needs.
type action struct {
	Verb verb
	// Deadline bounds the admission's wait (doCall before the first
	// call); zero = no bound.
	Deadline time.Time
	// MaxPause is how long the lane's buckets or a 429 pause may hold the
	// admission before it answers stepLanePaused (doCall); 0 = as long as
	// they do.
	MaxPause time.Duration
	// Delay is the wait before the retry (doRetry).
	Delay time.Duration
	// Budgeted says the retry is taken from the retry budget (doRetry).
	Budgeted bool
	// Status, Code and Message are the failure recorded (doFail): Status
	// is the upstream's HTTP status, 0 for a failure of llmq's own.
	Status        int
	Code, Message string
	// Reason is the dead letter's reason (doDeadLetter).
	Reason dlq.Reason
	// Entry is the pool entry to move to (doSwitchEntry).
	Entry int
	// Why says why, for the log (doFallBack, doExpire, doHandBack).
	Why string
}

// policy holds the settings the decisions read (Config's fields of the
// same names).
type policy struct {
	MaxAttempts     int
	FallbackAfter   int
	FallbackMaxWait time.Duration
	FallbackOn      []FallbackTrigger
	Backoff         Backoff
	OutageLimit     time.Duration
}

// free reports a call of e that costs the job no attempt: it failed for a
// provider outage that has lasted less than OutageLimit (negative: none
// is free).
func (p policy) free(e event) bool {
	return e.Step == stepCalled && e.Outage && e.OutageFor < p.OutageLimit
}

// trigger is the fallback trigger out is, and whether the policy falls
// back on it.
func (p policy) trigger(out Outcome) (FallbackTrigger, bool) {
	var t FallbackTrigger
	switch {
	case out.Class == ClassRateLimited:
		t = FallbackOnRateLimit
	case out.Class == ClassRetryable && out.Code == "timeout":
		t = FallbackOnTimeout
	case out.Class == ClassRetryable && out.Status >= 500:
		t = FallbackOnServerError
	default:
		return "", false
	}
	return t, slices.Contains(p.FallbackOn, t)
}

// fallbackWhy says why a job falls back after n failures of kind t.
var fallbackWhy = map[FallbackTrigger]string{
	FallbackOnRateLimit: "rate limited", FallbackOnServerError: "server error", FallbackOnTimeout: "timed out",
}

// decide returns the state after e and what to do next. It is pure: its
// only source of randomness, the backoff jitter, is rng.
func (p policy) decide(s state, e event, rng *rand.Rand) (state, action) {
	if s, a, ok := p.decideBefore(s, e); ok {
		return s, a
	}
	return p.decideCalled(s, e, rng)
}

// decideBefore decides the steps before a call (ok false for the others):
// the job is ready to call, its lane held it, or it was refused unsent.
func (p policy) decideBefore(s state, e event) (_ state, _ action, ok bool) {
	var a action
	switch e.Step {
	case stepReady:
		if s.Attempts >= p.MaxAttempts {
			// Claimed again with its calls spent (calls that never
			// answered: a holder that died mid-call, say).
			return s, action{Verb: doDeadLetter, Reason: dlq.ReasonRetriesExhausted}, true
		}
		a = action{Verb: doCall}
		if e.Pooled || e.Next > 0 && slices.Contains(p.FallbackOn, FallbackOnRateLimit) {
			// Another key of the pool, or a fallback model: the job
			// moves on rather than wait long.
			a.MaxPause = p.FallbackMaxWait
		}
		s, a = p.firstCall(s, e, a)
		return s, a, true
	case stepLanePaused:
		switch {
		case e.Entry > 0:
			// Another key of the model before any other model.
			s, a = switchEntry(s, e, "lane held it past fallback_max_wait")
			return s, a, true
		case e.Next > 0 && slices.Contains(p.FallbackOn, FallbackOnRateLimit):
			s, a = fallBack(s, e, "lane held it past fallback_max_wait")
			return s, a, true
		case e.Pooled:
			// No other key can take it and no fallback model: it waits
			// in its lane as a job with nowhere else to go does.
			s, a = p.firstCall(s, e, action{Verb: doCall})
			return s, a, true
		}
		return s, action{Verb: doHandBack, Why: errLanePaused.Error()}, true
	case stepTooLarge:
		return s, action{Verb: doFail, Code: "request_too_large", Message: e.Detail}, true
	case stepWaitTooLong:
		return s, action{Verb: doExpire, Why: "predicted wait passes the deadline: " + e.Detail}, true
	}
	return s, action{}, false
}

// decideCalled decides after a call by its outcome: success, failure, a
// move to another key or model, or a retry after a backoff.
func (p policy) decideCalled(s state, e event, rng *rand.Rand) (state, action) {
	free := p.free(e)
	if free {
		s.Free++
	} else {
		s.Attempts++
	}
	out := e.Outcome
	switch {
	case out.Class == ClassSuccess:
		return s, action{Verb: doSucceed}
	case out.Class == ClassPermanent && s.Model > 0 && isNotFound(out) && s.Attempts < p.MaxAttempts:
		// A fallback the provider does not serve is not the job's
		// failure while its first model can serve it (Next skips the
		// fallback from now on: unserved.go).
		s.Model, s.RateLimited = 0, 0
		return s, action{Verb: doFallBack, Why: "fallback model not found (HTTP 404): back to the first model"}
	case out.Class == ClassPermanent && !free:
		// A 401 while the lane is held for it is the provider's refusal
		// of the key, not the job's failure: it waits with the others.
		return s, action{Verb: doFail, Status: out.Status, Code: out.Code, Message: out.Message}
	}
	if s.Attempts >= p.MaxAttempts {
		return s, action{Verb: doDeadLetter, Reason: dlq.ReasonRetriesExhausted}
	}
	// Only the failures FallbackOn names move a job to a fallback model
	// (429s by default: a 5xx or a timeout says nothing about the model's
	// quota).
	if t, on := p.trigger(out); on {
		s.RateLimited++
		// The job moves to another key of its model's pool, else to a
		// fallback model, on the same conditions.
		move := fallBack
		if e.Entry > 0 {
			move = switchEntry
		}
		if e.Entry > 0 || e.Next > 0 {
			switch {
			case s.RateLimited >= p.FallbackAfter:
				return move(s, e, fallbackWhy[t]+" "+strconv.Itoa(s.RateLimited)+" times")
			case out.Headers.RetryAfter > p.FallbackMaxWait:
				return move(s, e, "retry-after "+out.Headers.RetryAfter.String())
			case !e.BudgetLeft:
				return move(s, e, "retry budget spent")
			}
		}
	}
	a := action{Verb: doRetry, Budgeted: e.BudgetLeft}
	switch {
	case out.Class == ClassRateLimited && out.Headers.Concurrency:
		// The provider's calls at a time, which the lane has learned
		// from this 429 and now holds to: its slots space the retry, not
		// the budget, and it waits the first backoff or what the
		// provider asked.
		a.Budgeted = false
		a.Delay = p.Backoff.Delay(0, out.Headers.RetryAfter, rng)
	case e.BudgetLeft:
		a.Delay = p.Backoff.Delay(s.Retries, out.Headers.RetryAfter, rng)
	default:
		// Refused by the budget: not given up, delayed the longest.
		a.Delay = max(p.Backoff.Max, out.Headers.RetryAfter)
	}
	s.Retries++
	return s, a
}

// firstCall returns a, the call the job makes next, unless it is the job's
// first call and the deadline passed: only the first call is held to the
// deadline (a job that started is finished).
func (p policy) firstCall(s state, e event, a action) (state, action) {
	if s.Attempts == 0 {
		if !e.Deadline.IsZero() && !e.Now.Before(e.Deadline) {
			return s, action{Verb: doExpire, Why: "deadline passed before the job started"}
		}
		a.Deadline = e.Deadline
	}
	return s, a
}

// switchEntry moves the job to the entry e.Entry - 1 of its model's pool,
// whose 429s are counted afresh.
func switchEntry(s state, e event, why string) (state, action) {
	s.RateLimited = 0
	return s, action{Verb: doSwitchEntry, Entry: e.Entry - 1, Why: why}
}

// fallBack moves s to the model e.Next, whose 429s are counted afresh.
func fallBack(s state, e event, why string) (state, action) {
	s.Model, s.RateLimited = e.Next, 0
	return s, action{Verb: doFallBack, Why: why}
}

// nextFallback is the index in chain of the first model after from whose
// context window holds the request (its prompt and its output allowance,
// the model's default when the request sets none) and that unserved (nil:
// none) does not name; 0 when there is none. A model whose window is
// unknown holds any request.
func nextFallback(cat llmq.Catalog, chain []string, from int, est shaping.Estimate, unserved func(model string) bool) int {
	for i := from + 1; i < len(chain); i++ {
		if unserved != nil && unserved(chain[i]) {
			continue
		}
		m := laneModel(cat, chain[i])
		if need := est.PromptTokens + cmp.Or(est.MaxOutputTokens, m.MaxOutputDefault); m.ContextWindow > 0 && need > m.ContextWindow {
			continue
		}
		return i
	}
	return 0
}

// laneModel returns the catalog entry of a model, with the shaping
// package's output allowance when it sets none.
func laneModel(cat llmq.Catalog, name string) llmq.Model {
	m := cat.Lookup(name)
	if m.MaxOutputDefault <= 0 {
		m.MaxOutputDefault = shaping.LaneMaxOutputDefault
	}
	return m
}
