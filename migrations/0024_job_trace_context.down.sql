-- 0024_job_trace_context: undo (jobs carry no trace context).
ALTER TABLE jobs DROP COLUMN trace_context;
