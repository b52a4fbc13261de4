package tracing

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Span names of a job's trace (docs/design/tracing.md).
const (
	SpanPublish    = "llmq.publish"
	SpanIngest     = "llmq.ingest"
	SpanQueueWait  = "llmq.queue.wait"
	SpanRun        = "llmq.run"
	SpanQuotaWait  = "llmq.quota.wait"
	SpanCall       = "llmq.upstream.call"
	SpanResultSave = "llmq.result.write"
	SpanJobWrite   = "llmq.job.write"
)

// Job is the trace of one job's run in a worker, from its claim until it
// leaves the worker: nil when tracing is off, and every method of a nil
// *Job returns at once.
type Job struct {
	ctx  context.Context
	span trace.Span
}

// JobInfo names the job a run traces.
type JobInfo struct {
	// Stored is the job's trace context as stored (Encode's form); ""
	// starts a new trace.
	Stored      string
	ID, Tenant  string
	Model       string
	Attempts    int
	Created     time.Time
	FirstClaim  bool
	ClaimedTime time.Time
	// Waits are what held the job in Postgres, each an event of its
	// llmq.queue.wait span (first claim only).
	Waits []Wait
}

// Wait is one waiting reason of a job (store's WaitingReason*:
// tenant_quota, provider_quota) and since when it held the job.
type Wait struct {
	Reason string
	Since  time.Time
}

// StartJob starts the run span of a claimed job under its stored trace
// context; on its first claim the wait in Postgres, from the job's record
// to the claim, is a span before it. Nil when tracing is off.
func StartJob(in JobInfo) *Job {
	if !enabled.Load() {
		return nil
	}
	ctx := Decode(context.Background(), in.Stored)
	attrs := trace.WithAttributes(attribute.String("llmq.job.id", in.ID), attribute.String("llmq.tenant", in.Tenant),
		attribute.String("gen_ai.request.model", in.Model))
	t := Tracer()
	if in.FirstClaim {
		_, wait := t.Start(ctx, SpanQueueWait, trace.WithTimestamp(in.Created), attrs)
		for _, w := range in.Waits {
			at := w.Since
			if at.Before(in.Created) {
				at = in.Created
			}
			wait.AddEvent(w.Reason, trace.WithTimestamp(at), trace.WithAttributes(attribute.String("llmq.waiting_reason", w.Reason)))
		}
		wait.End(trace.WithTimestamp(in.ClaimedTime))
	}
	ctx, span := t.Start(ctx, SpanRun, trace.WithTimestamp(in.ClaimedTime), attrs,
		trace.WithAttributes(attribute.Int("llmq.attempts_before", in.Attempts)))
	return &Job{ctx: ctx, span: span}
}

// Context is ctx carrying the run span, ctx itself when j is nil.
func (j *Job) Context(ctx context.Context) context.Context {
	if j == nil {
		return ctx
	}
	return trace.ContextWithSpan(ctx, j.span)
}

// Event records a step of the run (a retry's backoff, a fallback, a move
// to another pool entry) with its attributes.
func (j *Job) Event(name string, attrs ...attribute.KeyValue) {
	if j == nil {
		return
	}
	j.span.AddEvent(name, trace.WithAttributes(attrs...))
}

// End ends the run (Finished gave the job's status; none when the job
// left the worker unfinished: handed back, its lease lost).
func (j *Job) End() {
	if j == nil {
		return
	}
	j.span.End()
}

// Child starts a span under the run; a span that records nothing when j
// is nil.
func (j *Job) Child(name string, attrs ...attribute.KeyValue) trace.Span {
	if j == nil {
		return trace.SpanFromContext(context.Background())
	}
	_, s := Tracer().Start(j.ctx, name, trace.WithAttributes(attrs...))
	return s
}

// Call is what a call span records of one upstream call.
type Call struct {
	Model, Entry                   string
	Status                         int
	Class, Code                    string
	PromptTokens, CompletionTokens int
	// RetryAfter is the answer's Retry-After when it had one.
	RetryAfter    time.Duration
	HasRetryAfter bool
}

// EndCall ends the span of an upstream call with its outcome; an error
// status when the call did not succeed.
func EndCall(s trace.Span, c Call) {
	if !s.IsRecording() {
		return
	}
	s.SetAttributes(attribute.String("gen_ai.request.model", c.Model), attribute.String("llmq.pool.entry", c.Entry),
		attribute.Int("http.response.status_code", c.Status), attribute.String("llmq.outcome", c.Class),
		attribute.Int("gen_ai.usage.input_tokens", c.PromptTokens),
		attribute.Int("gen_ai.usage.output_tokens", c.CompletionTokens))
	if c.HasRetryAfter {
		s.SetAttributes(attribute.Float64("llmq.retry_after_s", c.RetryAfter.Seconds()))
	}
	if c.Code != "" {
		s.SetAttributes(attribute.String("error.type", c.Code))
	}
	if c.Class != "success" {
		s.SetStatus(codes.Error, c.Class)
	}
	s.End()
}

// EndErr ends s, with an error status when err is not nil.
func EndErr(s trace.Span, err error) {
	if !s.IsRecording() {
		return
	}
	if err != nil {
		s.SetStatus(codes.Error, err.Error())
	}
	s.End()
}

// StartPublish starts the span of a producer's publish of n jobs to dest.
func StartPublish(ctx context.Context, dest string, n int) (context.Context, trace.Span) {
	return Start(ctx, SpanPublish, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
		attribute.String("messaging.destination.name", dest), attribute.Int("messaging.batch.message_count", n)))
}

// Finished records the job's terminal status on its run.
func (j *Job) Finished(status string) {
	if j == nil {
		return
	}
	j.span.SetAttributes(attribute.String("llmq.job.status", status))
}

// StartIngest starts the ingest span of a message received at received,
// under the trace context of its headers h, and returns the context its
// job is stored with: the headers' (the publisher's span), or the ingest
// span's own when they carry none (the job's trace starts there). Off, it
// returns "" and a nil span.
func StartIngest(h map[string]string, id, source string, received time.Time) (string, trace.Span) {
	if !enabled.Load() {
		return "", nil
	}
	ctx := context.Background()
	if h[HeaderTraceparent] != "" {
		ctx = prop.Extract(ctx, propagation.MapCarrier(h))
	}
	stored := Encode(ctx)
	ctx, s := Tracer().Start(ctx, SpanIngest, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(received),
		trace.WithAttributes(attribute.String("llmq.job.id", id), attribute.String("messaging.source", source)))
	if stored == "" {
		stored = Encode(ctx)
	}
	return stored, s
}
