-- 0024_job_chunks: the chunks of a streamed gateway call on their way
-- from the worker that calls the provider to the API that answers the
-- caller (docs/design/gateway.md#streaming). Unlogged: a chunk lives for
-- the seconds of its call, and a crash loses only streams in flight.
CREATE UNLOGGED TABLE job_chunks (
    tenant     text        NOT NULL,
    job_id     text        NOT NULL,
    seq        integer     NOT NULL,
    data       text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, job_id, seq)
);
-- The streamed calls whose caller left: the worker cuts the upstream call
-- at its next chunk.
CREATE UNLOGGED TABLE job_stream_cancels (
    tenant     text        NOT NULL,
    job_id     text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, job_id)
);
