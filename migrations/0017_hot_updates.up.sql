-- 0017_hot_updates: a worker's call on a job (MarkCalling: phase, attempts,
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
-- jobs_lease_owner_idx had no reader left (the heartbeat renews leases by
-- key): dropping it saves an index entry per claim.
--
-- fillfactor 50 leaves half of each page an insert fills for the new
-- versions of its rows, so the call's version finds room beside the claim's
-- (docs/design/platform.md, the quietest replays of the worker's statements:
-- 1.00 of the calls HOT, 0.89 at 60, 0.64 at 70, 0.40 at 80, 0.01 at 100;
-- fewer while older snapshots keep pages from pruning). A queued
-- backlog takes twice the heap it took; jobs once run take less than before,
-- since a page prunes its own HOT chains without a vacuum. It applies to
-- the pages filled from now on.
DROP INDEX jobs_batch_pending_idx;
CREATE INDEX jobs_batch_pending_idx ON jobs (requested_model, created_at, tenant, id)
    WHERE lane = 'batch' AND status = 'queued' AND batch_id = '';
DROP INDEX jobs_deferrable_idx;
CREATE INDEX jobs_deferrable_idx ON jobs (requested_model, created_at, tenant, id)
    WHERE status = 'queued' AND "deferrable" AND lane = 'live' AND lane_reason = '';
DROP INDEX jobs_lease_owner_idx;
ALTER TABLE jobs SET (fillfactor = 50);
