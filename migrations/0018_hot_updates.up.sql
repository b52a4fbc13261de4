-- 0018_hot_updates: a worker's call on a job (MarkCalling: phase, attempts,
-- started_at, updated_at) becomes a heap-only (HOT) update, which writes no
-- index entry; before, each of the three updates a job makes on its way
-- (claim, call, result) wrote an entry into every index whose predicate the
-- new row matches. PostgreSQL makes an update HOT when it changes no column
-- that an index names (in its key or its predicate) and the new row version
-- fits on the page of the old one. The claim and the result change the
-- status, which the claim's and the listings' indexes name: they cannot be.
--
-- updated_at changes with every update of a job, and two indexes named it:
-- the batch lane read its candidates oldest-updated first. It now reads them
-- in the order they were recorded (created_at, tenant, id): the oldest job
-- goes first into a batch, and a job handed back by a batch the provider
-- never accepted keeps its place instead of going behind every job recorded
-- since.
--
-- The tenants' usage index (0017) included attempts, which the call
-- increments: it named a column the call changes, so no call was HOT. It
-- now includes calls, a stored column that is attempts once the job has
-- finished and NULL before: the call leaves it NULL (unchanged), and the
-- usage still reads its sums from the index alone. Adding it rewrites the
-- table once (5.5 s for 200,000 finished jobs here, with the index built
-- again: about half a minute for 1,000,000). A tenant's usage with 20,000
-- jobs finished today: 7-8 ms, index only (13-26 ms with attempts; 400-550
-- ms without the column, from the heap).
--
-- jobs_lease_owner_idx had no reader left (the heartbeat renews leases by
-- key): dropping it saves an index entry per claim.
--
-- fillfactor 60 leaves two fifths of each page an insert fills for the new
-- versions of its rows, so the call's version finds room beside the claim's
-- (docs/design/platform.md, the quietest replays of the worker's statements:
-- 0.89 of the calls HOT at 60, 1.00 at 50, 0.64 at 70, 0.40 at 80, 0.01 at
-- 100; fewer while older snapshots keep pages from pruning). 60 rather than
-- 50: a queued backlog takes 1.67 times the heap it took (twice at 50: at
-- 1,000,000 queued jobs that is gigabytes), and jobs once run take less
-- than before at either (32.9 MB against 51.6 for 20,480 jobs; 34.3 at
-- 50), since a page prunes its own HOT chains without a vacuum. It applies
-- to the pages filled from now on.
DROP INDEX jobs_batch_pending_idx;
CREATE INDEX jobs_batch_pending_idx ON jobs (requested_model, created_at, tenant, id)
    WHERE lane = 'batch' AND status = 'queued' AND batch_id = '';
DROP INDEX jobs_deferrable_idx;
CREATE INDEX jobs_deferrable_idx ON jobs (requested_model, created_at, tenant, id)
    WHERE status = 'queued' AND "deferrable" AND lane = 'live' AND lane_reason = '';
DROP INDEX jobs_lease_owner_idx;
ALTER TABLE jobs ADD COLUMN calls integer
    GENERATED ALWAYS AS (CASE WHEN finished_at IS NOT NULL THEN attempts END) STORED;
DROP INDEX jobs_tenant_finished_idx;
CREATE INDEX jobs_tenant_finished_idx ON jobs (tenant, finished_at)
    INCLUDE (project, calls, prompt_tokens, completion_tokens) WHERE finished_at IS NOT NULL;
ALTER TABLE jobs SET (fillfactor = 60);
