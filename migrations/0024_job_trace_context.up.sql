-- 0024_job_trace_context: the W3C trace context a job's trace continues
-- from (traceparent, then a newline and the tracestate when there is one;
-- '' for none), so a worker that claims the job continues the trace of
-- the request or producer that enqueued it (docs/design/tracing.md).
ALTER TABLE jobs ADD COLUMN trace_context text NOT NULL DEFAULT '';
