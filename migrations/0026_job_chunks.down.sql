-- 0024_job_chunks: undo (streamed gateway calls are answered once the
-- completion is whole).
DROP TABLE job_stream_cancels;
DROP TABLE job_chunks;
