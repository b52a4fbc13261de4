package store

import (
	"context"
	"fmt"
	"time"

	"github.com/llmq/llmq"
)

// Retention says how long finished rows are kept (migration 0006). A zero
// period keeps that kind of row forever.
type Retention struct {
	// Jobs is the period per terminal status, counted from the job's end
	// (finished_at). A dead-lettered job is kept while its dead letter is.
	Jobs map[llmq.Status]time.Duration
	// DeadLetters is counted from the letter's creation; a letter not yet
	// published to the dead-letter queue, or whose replay is still being
	// published, is kept.
	DeadLetters time.Duration
	// Batches is counted from the batch's ingestion (ingested_at).
	Batches time.Duration
	// Tombstones is how long a pruned job's key is kept, counted from the
	// prune: longer than the brokers keep messages, so that a late
	// duplicate of the job's message is never ingested again.
	Tombstones time.Duration
	// Audit is how long an entry of the tenancy's audit log is kept
	// (tenancy.go), counted from the change.
	Audit time.Duration
	// BatchSize is the most rows one statement deletes (default 1,000):
	// each statement is a short transaction that holds its row locks
	// briefly, and rows other transactions hold are skipped.
	BatchSize int
}

// PruneBatchSizeDefault is Retention.BatchSize when unset.
const PruneBatchSizeDefault = 1000

// Pruned counts what one Prune deleted, by kind: "jobs", "dead_letters",
// "batches", "tombstones", "audit", and "streams" (rows of streamed calls, only
// when some were).
type Pruned map[string]int64

// pruneJobsSQL deletes up to $3 jobs of status $1 that finished before $2,
// oldest first, with their attempts (job_attempts has no foreign key:
// migration 0019), and leaves a tombstone of each at $4. It returns how
// many jobs it deleted.
const pruneJobsSQL = `WITH victims AS (
	SELECT tenant, id FROM jobs j
	WHERE finished_at < $2 AND status = $1
		AND ($1 <> 'dead_lettered' OR NOT EXISTS (
			SELECT 1 FROM dead_letters d WHERE d.tenant = j.tenant AND d.job_id = j.id AND d.job_id <> ''))
	ORDER BY finished_at
	LIMIT $3
	FOR UPDATE SKIP LOCKED
), gone AS (
	DELETE FROM jobs j USING victims v WHERE j.tenant = v.tenant AND j.id = v.id
	RETURNING j.tenant, j.id
), calls AS (
	DELETE FROM job_attempts a USING gone g WHERE a.tenant = g.tenant AND a.job_id = g.id
), marked AS (
	INSERT INTO job_tombstones (tenant, id, pruned_at) SELECT tenant, id, $4 FROM gone
	ON CONFLICT (tenant, id) DO UPDATE SET pruned_at = excluded.pruned_at
)
SELECT count(*) FROM gone`

const pruneDeadLettersSQL = `WITH victims AS (
	SELECT id FROM dead_letters
	WHERE created_at < $1 AND published_at IS NOT NULL
		AND (replayed_at IS NULL OR replay_published_at IS NOT NULL)
	ORDER BY created_at, id
	LIMIT $2
	FOR UPDATE SKIP LOCKED
), gone AS (DELETE FROM dead_letters d USING victims v WHERE d.id = v.id RETURNING 1)
SELECT count(*) FROM gone`

const pruneBatchesSQL = `WITH victims AS (
	SELECT id FROM batches WHERE ingested_at < $1
	ORDER BY ingested_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED
), gone AS (DELETE FROM batches b USING victims v WHERE b.id = v.id RETURNING 1)
SELECT count(*) FROM gone`

const pruneTombstonesSQL = `WITH victims AS (
	SELECT tenant, id FROM job_tombstones WHERE pruned_at < $1
	ORDER BY pruned_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED
), gone AS (
	DELETE FROM job_tombstones t USING victims v WHERE t.tenant = v.tenant AND t.id = v.id RETURNING 1
)
SELECT count(*) FROM gone`

const pruneAuditSQL = `WITH victims AS (
	SELECT id FROM tenancy_audit WHERE at < $1
	ORDER BY at
	LIMIT $2
	FOR UPDATE SKIP LOCKED
), gone AS (DELETE FROM tenancy_audit a USING victims v WHERE a.id = v.id RETURNING 1)
SELECT count(*) FROM gone`

// Prune deletes what r's periods let go, in statements of at most
// r.BatchSize rows, until nothing more is due or ctx ends. Several
// processes may prune at once: each skips the rows another holds. It
// returns what it deleted, with the error that stopped it.
func (s *Store) Prune(ctx context.Context, r Retention) (Pruned, error) {
	batch := r.BatchSize
	if batch <= 0 {
		batch = PruneBatchSizeDefault
	}
	now := s.clock()
	out := Pruned{}
	drain := func(kind, sql string, args ...any) error {
		for {
			var n int64
			if err := s.pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
				return fmt.Errorf("store: prune %s: %w", kind, err)
			}
			out[kind] += n
			if n < int64(batch) {
				return nil
			}
		}
	}
	for _, st := range llmq.Statuses {
		if d := r.Jobs[st]; st.Terminal() && d > 0 {
			if err := drain("jobs", pruneJobsSQL, string(st), now.Add(-d), batch, now); err != nil {
				return out, err
			}
		}
	}
	for _, k := range []struct {
		kind, sql string
		period    time.Duration
	}{
		{"dead_letters", pruneDeadLettersSQL, r.DeadLetters},
		{"batches", pruneBatchesSQL, r.Batches},
		{"tombstones", pruneTombstonesSQL, r.Tombstones},
		{"audit", pruneAuditSQL, r.Audit},
	} {
		if k.period > 0 {
			if err := drain(k.kind, k.sql, now.Add(-k.period), batch); err != nil {
				return out, err
			}
		}
	}
	var n int64
	if err := s.pool.QueryRow(ctx, pruneStreamsSQL).Scan(&n); err != nil {
		return out, fmt.Errorf("store: prune streams: %w", err)
	} else if n > 0 {
		out["streams"] = n
	}
	return out, nil
}

// pruneStreamsSQL deletes the streamed calls' rows (chunks.go) over two
// hours old, on the database's clock, and returns how many: the API
// deletes a call's chunks once it answered, so these were left by an API
// that stopped mid-stream, or by a caller's cancel no append read, past
// any call's deadline (gateway.max_deadline, 30 min by default).
const pruneStreamsSQL = `WITH c AS (DELETE FROM job_chunks WHERE created_at < now() - interval '2 hours' RETURNING 1),
	x AS (DELETE FROM job_stream_cancels WHERE created_at < now() - interval '2 hours' RETURNING 1)
	SELECT (SELECT count(*) FROM c) + (SELECT count(*) FROM x)`

// TableBytes reports the size on disk (pg_total_relation_size: rows,
// TOAST and indexes) of the tables that grow with the work.
func (s *Store) TableBytes(ctx context.Context) (map[string]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT t, pg_total_relation_size(t::regclass)
		FROM unnest(ARRAY['jobs', 'dead_letters', 'batches', 'job_tombstones']) AS t`)
	if err != nil {
		return nil, fmt.Errorf("store: table sizes: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			return nil, fmt.Errorf("store: table sizes: %w", err)
		}
		out[name] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: table sizes: %w", err)
	}
	return out, nil
}
