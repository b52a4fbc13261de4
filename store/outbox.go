package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/llmq/llmq"
)

// Outbox is the jobs recorded before they are published (the producer's
// outbox): recorded, marked published on the broker's confirm, swept when
// no confirm came; with the queue's figures the producer's admission reads.
// It is reached by Store.Outbox.
type Outbox struct {
	*base
	QueueFigures
}

// The producer's outbox (migration 0003): a row inserted by InsertOutbox has
// published_at NULL until MarkPublished records the broker's confirm;
// Unpublished finds the queued rows a crash left unconfirmed.
// InsertOutboxPublishing records rows already marked, in a transaction that
// commits once their publish is confirmed: no second write per row.

// insertOutboxSQL records many jobs in one statement, as ingestSQL with
// published_at $17 (NULL: not yet published), and answers one row per job
// in the order given (u.n, from 1): whether it was created, and the status
// of the job that was there before (NULL when there was none, or when a
// concurrent transaction committed it after the statement's snapshot: the
// caller reads those again). The keys must be distinct (the jobs of the
// INSERT and of the join are one each).
const insertOutboxSQL = `WITH u AS (
	SELECT * FROM ` + jobUnnest + ` WITH ORDINALITY AS u(` + jobUnnestColumns + `, n)
), ins AS (
	INSERT INTO jobs (` + jobInsertColumns + `, published_at)
	SELECT ` + jobValues + `, $17::timestamptz FROM u
	WHERE NOT EXISTS (SELECT 1 FROM job_tombstones t WHERE t.tenant = u.tenant AND t.id = u.id)
	ON CONFLICT (tenant, id) DO NOTHING
	RETURNING tenant, id
)
SELECT u.n, ins.id IS NOT NULL, j.status
FROM u LEFT JOIN ins ON ins.tenant = u.tenant AND ins.id = u.id
	LEFT JOIN jobs j ON j.tenant = u.tenant AND j.id = u.id
ORDER BY u.n`

// insertOneSQL records one job as queued, published at $17 (NULL: not
// yet), in the pipeline InsertOutbox sends for a few jobs; the status of a
// job it did not create is read after the pipeline, in a snapshot of its
// own.
const insertOneSQL = `INSERT INTO jobs (id, tenant, status, priority, requested_model, body, created_at,
	updated_at, deadline, "deferrable", fallback_models, metadata, sched_key, est_prompt_tokens, est_output_tokens,
	project, trace_context, reply, published_at)
SELECT $1, $2, 'queued', $3, $4, $5, $6, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16::jsonb, $17::timestamptz
WHERE NOT EXISTS (SELECT 1 FROM job_tombstones t WHERE t.tenant = $2 AND t.id = $1)
ON CONFLICT (tenant, id) DO NOTHING`

// outboxArraysFrom is the fewest distinct jobs InsertOutbox records with
// insertOutboxSQL: below it, a statement per job costs Postgres less (the
// statement over arrays has a fixed cost, its CTEs, hash join and sort).
// Measured with 4 writers: 16 jobs 91-113 µs of Postgres CPU per job as
// single statements, 138-147 over arrays; 64 jobs 103 and 29; 256 jobs 80
// and 27. Yet the API's flushes (tens of jobs) cost Postgres more over
// arrays (BenchmarkEnqueue, docs/bench/enqueue.md): they keep the
// statement per job, and produce's flushes of hundreds take the arrays.
const outboxArraysFrom = 128

// Recorded says what InsertOutbox did with one job.
type Recorded struct {
	// Created is false when the tenant already had a job with this id;
	// that job was left as it is.
	Created bool
	// Status is the job's status: queued when created, the existing job's
	// otherwise, and "" when the id was a job's that finished and was
	// pruned (its tombstone keeps the id from being used again).
	Status llmq.Status
}

// InsertOutbox records jobs as queued and not yet published, all in one
// statement and one transaction (all rows or none), and reads the status
// of the jobs that already existed: once it returns without error, every
// job is recorded and nothing is left to read. A key repeated in jobs is
// recorded once, by its first job; the later ones are reported not
// created, with the first one's status. Every job must be valid; an
// invalid one returns ErrInvalidJob and nothing is written. Each job is
// recorded with the estimate and size delay it carries (Sizer.NewJob,
// which the caller runs: the producer, in each caller's goroutine rather
// than in the flush they share).
func (s *Outbox) InsertOutbox(ctx context.Context, jobs []NewJob) ([]Recorded, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	got, err := s.insertOutbox(ctx, s.pool, false, jobs, s.clock(), nil)
	if err != nil {
		return nil, err
	}
	s.announceCreated(jobs, got)
	return got, nil
}

// announceCreated announces the models of the jobs got says were created
// (announce.go), once their transaction committed.
func (s *Outbox) announceCreated(jobs []NewJob, got []Recorded) {
	var models []string
	for i, r := range got {
		if r.Created {
			models = append(models, jobs[i].Job.Model())
		}
	}
	s.announce.announce(models...)
}

// InsertOutboxPublishing records jobs as InsertOutbox does, but marked
// published, in a transaction held open while publish sends the created ones
// (recorded says which), so a confirmed job takes one write and one commit.
// When publish fails, the rows are committed unpublished for the sweeper and
// the error is publish's to report; it returns only the database's. Why and
// the failure cases: docs/design/queue-of-record.md#insertoutboxpublishing.
func (s *Outbox) InsertOutboxPublishing(ctx context.Context, jobs []NewJob, publish func(recorded []Recorded) error) ([]Recorded, error) {
	if len(jobs) == 0 {
		return nil, publish(nil)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: insert outbox: %w", err)
	}
	defer conn.Release()
	// The transaction's BEGIN goes in the insert's pipeline (a round trip
	// less per flush than pool.Begin); whatever did not commit is rolled
	// back before the connection returns to the pool.
	defer func() {
		if conn.Conn().PgConn().TxStatus() != 'I' {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	now := s.clock()
	got, err := s.insertOutbox(ctx, conn, true, jobs, now, &now)
	if err != nil {
		return nil, err
	}
	if publish(got) != nil {
		var tenants, ids []string
		for i, r := range got {
			if r.Created {
				tenants, ids = append(tenants, jobs[i].Job.Tenant), append(ids, jobs[i].Job.ID)
			}
		}
		if _, err := conn.Exec(ctx, `UPDATE jobs j SET published_at = NULL FROM unnest($1::text[], $2::text[]) AS u(tenant, id)
			WHERE j.tenant = u.tenant AND j.id = u.id`, tenants, ids); err != nil {
			return nil, fmt.Errorf("store: insert outbox: unmark %d unpublished jobs: %w", len(ids), err)
		}
	}
	// COMMIT of a failed transaction rolls it back and says so in its tag.
	if tag, err := conn.Exec(ctx, "COMMIT"); err != nil || tag.String() != "COMMIT" {
		return nil, fmt.Errorf("store: insert outbox: commit %d jobs: %w", len(jobs), errors.Join(err, pgx.ErrTxCommitRollback))
	}
	s.announceCreated(jobs, got)
	return got, nil
}

// outboxDB is what an outbox insert runs on: the pool (a batch is its own
// transaction) or a connection on which the insert begins a transaction.
type outboxDB interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// insertOutbox is InsertOutbox on db, with published_at set to
// publishedAt (nil: NULL). With begin, the insert's pipeline opens with
// BEGIN, and the transaction stays open for the caller to end.
func (s *Outbox) insertOutbox(ctx context.Context, db outboxDB, begin bool, jobs []NewJob, now time.Time, publishedAt *time.Time) ([]Recorded, error) {
	for _, n := range jobs {
		if err := validate("insert outbox", n.Job); err != nil {
			return nil, err
		}
	}
	// first[i] is the index of the first job with jobs[i]'s key; only
	// first jobs are sent.
	first := make([]int, len(jobs))
	seen := make(map[Key]int, len(jobs))
	distinct := make([]NewJob, 0, len(jobs))
	for i, n := range jobs {
		k := Key{Tenant: n.Job.Tenant, ID: n.Job.ID}
		if f, ok := seen[k]; ok {
			first[i] = f
			continue
		}
		seen[k], first[i] = i, i
		distinct = append(distinct, n)
	}
	b := &pgx.Batch{}
	if begin {
		b.Queue("BEGIN")
	}
	var (
		got    []Recorded
		unread []Key // not created, and no status seen: read after
		err    error
	)
	if len(distinct) < s.outboxArraysFrom {
		got, unread, err = s.insertEach(ctx, db, b, distinct, now, publishedAt)
	} else {
		got, unread, err = s.insertArrays(ctx, db, b, distinct, now, publishedAt)
	}
	if err != nil {
		return nil, err
	}
	if len(unread) > 0 {
		// Either pruned (a tombstone: status "") or there before (or
		// committed by another transaction while this one ran): read them
		// in a snapshot of now.
		statuses, err := statuses(ctx, db, unread)
		if err != nil {
			return nil, fmt.Errorf("store: insert outbox: %w", err)
		}
		for i, n := range distinct {
			if !got[i].Created && got[i].Status == "" {
				got[i].Status = statuses[Key{Tenant: n.Job.Tenant, ID: n.Job.ID}]
			}
		}
	}
	return spread(jobs, first, got), nil
}

// insertArrays records jobs (distinct keys) with insertOutboxSQL, queued
// in b after what b holds (a BEGIN, or nothing), and returns what it did
// and the keys of the jobs not created whose status it did not see.
func (s *Outbox) insertArrays(ctx context.Context, db outboxDB, b *pgx.Batch, jobs []NewJob, now time.Time, publishedAt *time.Time) ([]Recorded, []Key, error) {
	args, err := s.jobArrays("insert outbox", jobs, now)
	if err != nil {
		return nil, nil, err
	}
	head := b.Len()
	b.Queue(insertOutboxSQL, append(args, publishedAt)...)
	op := fmt.Sprintf("insert outbox of %d jobs", len(jobs))
	br := db.SendBatch(ctx, b)
	defer br.Close()
	for range head {
		if _, err := br.Exec(); err != nil {
			return nil, nil, fmt.Errorf("store: %s: %w", op, err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, nil, dataError(op, err)
	}
	got := make([]Recorded, len(jobs))
	var unread []Key
	var (
		n       int
		created bool
		status  *string
	)
	if _, err := pgx.ForEachRow(rows, []any{&n, &created, &status}, func() error {
		r := &got[n-1]
		switch r.Created = created; {
		case created:
			r.Status = llmq.StatusQueued
		case status != nil:
			r.Status = llmq.Status(*status)
		default:
			unread = append(unread, Key{Tenant: jobs[n-1].Job.Tenant, ID: jobs[n-1].Job.ID})
		}
		return nil
	}); err != nil {
		return nil, nil, dataError(op, err)
	}
	if err := br.Close(); err != nil {
		return nil, nil, fmt.Errorf("store: %s: %w", op, err)
	}
	return got, unread, nil
}

// spread answers each of jobs from got, the answers of its distinct jobs
// in order: first[i] is the index of the first job with jobs[i]'s key, and
// a repeat is not created, with the first one's status.
func spread(jobs []NewJob, first []int, got []Recorded) []Recorded {
	out := make([]Recorded, len(jobs))
	k := 0
	for i := range jobs {
		if first[i] == i {
			out[i] = got[k]
			k++
			continue
		}
		out[i] = Recorded{Status: out[first[i]].Status}
	}
	return out
}

// insertEach records jobs (distinct keys) with a statement each, queued in
// b after what b holds (a BEGIN, or nothing), in one pipeline and one
// transaction. A job not created is the one there before, or a pruned
// job's id: it returns their keys, whose status the caller reads (a
// statement more only when a key was taken).
func (s *Outbox) insertEach(ctx context.Context, db outboxDB, b *pgx.Batch, jobs []NewJob, now time.Time, publishedAt *time.Time) ([]Recorded, []Key, error) {
	head := b.Len()
	for _, n := range jobs {
		b.Queue(insertOneSQL, append(s.insertArgs(n, now), publishedAt)...)
	}
	// A batch is sent with one Sync: its statements form one implicit
	// transaction (or are in the one its BEGIN opens), so a failure leaves
	// none of the rows.
	br := db.SendBatch(ctx, b)
	defer br.Close()
	for range head {
		if _, err := br.Exec(); err != nil {
			return nil, nil, fmt.Errorf("store: insert outbox: %w", err)
		}
	}
	out := make([]Recorded, len(jobs))
	var unread []Key
	for i, n := range jobs {
		tag, err := br.Exec()
		if err != nil {
			return nil, nil, dataError(fmt.Sprintf("insert outbox %q", n.Job.ID), err)
		}
		if tag.RowsAffected() == 1 {
			out[i] = Recorded{Created: true, Status: llmq.StatusQueued}
			continue
		}
		unread = append(unread, Key{Tenant: n.Job.Tenant, ID: n.Job.ID})
	}
	if err := br.Close(); err != nil {
		return nil, nil, fmt.Errorf("store: insert outbox: %w", err)
	}
	return out, unread, nil
}

// statuses reads the status of the jobs keys that exist.
func statuses(ctx context.Context, db outboxDB, keys []Key) (map[Key]llmq.Status, error) {
	tenants, ids := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		tenants[i], ids[i] = k.Tenant, k.ID
	}
	rows, err := db.Query(ctx, `SELECT j.tenant, j.id, j.status FROM jobs j
		JOIN unnest($1::text[], $2::text[]) AS u(tenant, id) ON j.tenant = u.tenant AND j.id = u.id`, tenants, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[Key]llmq.Status, len(keys))
	var (
		k  Key
		st string
	)
	_, err = pgx.ForEachRow(rows, []any{&k.Tenant, &k.ID, &st}, func() error {
		out[k] = llmq.Status(st)
		return nil
	})
	return out, err
}

// MarkPublished records that the broker confirmed the messages of the jobs
// keys. Rows already marked keep their first time.
func (s *Outbox) MarkPublished(ctx context.Context, keys []Key) error {
	if len(keys) == 0 {
		return nil
	}
	tenants, ids := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		tenants[i], ids[i] = k.Tenant, k.ID
	}
	_, err := s.pool.Exec(ctx, `UPDATE jobs j SET published_at = $3 FROM unnest($1::text[], $2::text[]) AS u(tenant, id)
		WHERE j.tenant = u.tenant AND j.id = u.id AND j.published_at IS NULL`, tenants, ids, s.clock())
	if err != nil {
		return fmt.Errorf("store: mark %d jobs published: %w", len(keys), err)
	}
	return nil
}

// Unpublished returns up to limit queued jobs created before cutoff whose
// publish was never confirmed, oldest first.
func (s *Outbox) Unpublished(ctx context.Context, cutoff time.Time, limit int) ([]*JobRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+jobColumns+` FROM jobs
		WHERE published_at IS NULL AND status = 'queued' AND created_at < $1
		ORDER BY created_at, tenant, id LIMIT $2`, cutoff, limit)
	if err != nil {
		return nil, fmt.Errorf("store: unpublished: %w", err)
	}
	recs, err := pgx.CollectRows(rows, scanJob)
	if err != nil {
		return nil, fmt.Errorf("store: unpublished: %w", err)
	}
	return recs, nil
}

// QueueStats are the Postgres side of the queue's backpressure figures.
type QueueStats struct {
	// Queued counts the jobs waiting in Postgres (ingested or recorded by
	// the producer, not yet claimed), up to the limit asked for.
	Queued int64
	// InFlight counts the jobs running or retrying (held by workers).
	InFlight int64
	// Finished counts the jobs that reached a terminal state since the
	// time asked for; FirstFinished is the earliest of their ends (zero
	// when none).
	Finished      int64
	FirstFinished time.Time
	// Consuming says a worker is alive and taking jobs: it holds a lease
	// that has not expired, or one of its schedulers wrote a model state
	// within ModelStateTTL (they do every second while queued jobs wait).
	// False with jobs waiting: no worker consumes them.
	Consuming bool
}

// QueueStats counts the jobs queued (up to limit; <= 0: all of them),
// those in flight and those finished since since, and says whether a
// worker is consuming. A caller that only compares the backlog with a
// threshold (the producer's hard depth) passes it as limit: the count reads
// one index entry per queued job, 55 ms at 1,000,000 queued jobs with the
// index cached (0.5 s measured under load), 8 ms up to 100,000
// (docs/design/queue-of-record.md).
func (s *QueueFigures) QueueStats(ctx context.Context, since time.Time, limit int64) (QueueStats, error) {
	var st QueueStats
	var first pgtype.Timestamptz
	now := s.clock()
	var bound any // NULL: LIMIT ALL
	if limit > 0 {
		bound = limit
	}
	err := s.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM (SELECT FROM jobs WHERE status = 'queued' LIMIT $4::bigint) q),
		(SELECT count(*) FROM jobs WHERE status `+leasedIn+`),
		(SELECT count(*) FROM jobs WHERE finished_at IS NOT NULL AND finished_at >= $1),
		(SELECT coalesce(min(finished_at), '-infinity') FROM jobs WHERE finished_at IS NOT NULL AND finished_at >= $1),
		EXISTS (SELECT 1 FROM jobs WHERE status `+leasedIn+` AND lease_expires_at > $2)
			OR EXISTS (SELECT 1 FROM model_state WHERE updated_at > $3)`, since, now, now.Add(-ModelStateTTL), bound).
		Scan(&st.Queued, &st.InFlight, &st.Finished, &first, &st.Consuming)
	if err != nil {
		return QueueStats{}, fmt.Errorf("store: queue stats: %w", err)
	}
	if first.Valid && first.InfinityModifier == pgtype.Finite {
		st.FirstFinished = first.Time
	}
	return st, nil
}
