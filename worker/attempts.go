package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/llmq/llmq/store"
)

// Recording a job's calls (table job_attempts, see store/attempts.go): the
// worker hands the store what it knows of each call, and the store folds
// it into the writes the pipeline makes anyway. MarkCalling records the
// call (attempt.call); the answer waits in attempt.answered until the next
// write of the job carries it (MarkRetrying, StoreResult, the next
// MarkCalling after a fallback), or, when the job ends or is handed back
// without such a write, until flushAnswer records it on its own.

// attempt is what the job's holder knows of its calls but has not written.
type attempt struct {
	// number is the last call's number, as MarkCalling returned it.
	number int
	// backoff is the backoff waited since the last call.
	backoff time.Duration
	// answered is the last call's answer, until a write records it.
	answered *store.Answer
}

// call is the record of the call about to be made on model (by its pool
// entry, "" without a pool) after a wait of quotaWait for admission, with
// the answer to the previous call when none recorded it yet.
func (a *attempt) call(st store.PolicyState, model, entry string, quotaWait time.Duration) store.PolicyState {
	st.Call = store.Call{Model: model, Entry: entry, QuotaWait: quotaWait, Backoff: a.backoff}
	st.Answered = a.answered
	return st
}

// called notes the call's number once MarkCalling recorded it.
func (a *attempt) called(number int) {
	a.number, a.backoff, a.answered = number, 0, nil
}

// answer notes how the call came back, at.
func (a *attempt) answer(r Reply, at time.Time) {
	out := r.Outcome
	a.answered = &store.Answer{Attempt: a.number, At: at, Status: out.Status, Outcome: out.Class.String(),
		ErrorCode: clean(out.Code), PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens,
		LimitRequests: out.Headers.LimitRequests, LimitTokens: out.Headers.LimitTokens}
	if out.Headers.HasRetryAfter {
		a.answered.RetryAfter = out.Headers.RetryAfter
	}
}

// flushAnswer records p's unrecorded answer, if any, with a statement of
// its own: the job leaves the pipeline by a write that does not carry it.
// A failure is logged; the job's own write goes on.
func (c *caller) flushAnswer(p *job) {
	a := p.attempt.answered
	if a == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), markTimeout)
	defer cancel()
	if err := c.cfg.Store.EndAttempt(ctx, p.lease.Key, *a); err != nil {
		p.log.Warn("record the call's answer", slog.Any("error", err))
		return
	}
	p.attempt.answered = nil
}
