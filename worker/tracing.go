package worker

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmq/llmq/internal/tracing"
	"github.com/llmq/llmq/store"
)

// The worker's part of a job's trace (internal/tracing,
// docs/design/tracing.md). Every helper returns at once when tracing is
// off: p.trace is nil and its spans record nothing.

// traceStart starts the run span of the claimed job p.
func (c *caller) traceStart(p *job, rec *store.JobRecord) {
	if !tracing.Enabled() {
		return
	}
	first := rec.LeaseToken <= 1
	var waits []tracing.Wait
	if first {
		waits = c.cfg.Holds.waits(rec)
	}
	p.trace = tracing.StartJob(tracing.JobInfo{Stored: rec.TraceContext, ID: rec.ID, Tenant: rec.Tenant,
		Model: rec.RequestedModel, Attempts: rec.Attempts, Created: rec.CreatedAt,
		FirstClaim: first, ClaimedTime: time.Now(), Waits: waits})
}

// endQuotaWait ends the span of a wait for admission in a lane.
func endQuotaWait(s trace.Span, model string, a admission, err error) {
	if !s.IsRecording() {
		return
	}
	s.SetAttributes(attribute.String("gen_ai.request.model", model), attribute.Float64("llmq.waited_s", a.waited.Seconds()))
	tracing.EndErr(s, err)
}

// endCall ends the span of p's upstream call to model (at its pool's
// entry, "" without a pool) with its reply.
func endCall(s trace.Span, p *job, model, entry string) {
	if !s.IsRecording() {
		return
	}
	o := p.reply.Outcome
	tracing.EndCall(s, tracing.Call{Model: model, Entry: entry, Status: o.Status, Class: o.Class.String(),
		Code: o.Code, PromptTokens: p.reply.PromptTokens, CompletionTokens: p.reply.CompletionTokens,
		RetryAfter: o.Headers.RetryAfter, HasRetryAfter: o.Headers.HasRetryAfter})
}

// durable is durableWrite in a span of its own (what names the write): the
// result's is llmq.result.write, the other states' llmq.job.write.
func (c *caller) durable(p *job, ctx context.Context, what string, write func(ctx context.Context) error) error {
	if p.trace == nil {
		return c.durableWrite(p, ctx, what, write)
	}
	name := tracing.SpanJobWrite
	if what == "store result" {
		name = tracing.SpanResultSave
	}
	s := p.trace.Child(name, attribute.String("llmq.write", what))
	err := c.durableWrite(p, ctx, what, write)
	tracing.EndErr(s, err)
	return err
}
