package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
)

const day = 24 * time.Hour

var retention = store.Retention{
	Jobs: map[llmq.Status]time.Duration{
		llmq.StatusSucceeded: 7 * day, llmq.StatusFailed: 30 * day, llmq.StatusDeadLettered: 30 * day,
		llmq.StatusExpired: 30 * day, llmq.StatusCancelled: 30 * day,
	},
	DeadLetters: 30 * day,
	Batches:     30 * day,
	Tombstones:  60 * day,
	BatchSize:   2, // several statements per kind
}

// retentionBundle is a store with a fake clock and a pool on the same
// database, to age rows.
type retentionBundle struct {
	*testBundle
	db *pgxpool.Pool
}

func setupRetention(t *testing.T) *retentionBundle {
	t.Helper()
	url := storetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	ctx := context.Background()
	s, err := store.Open(ctx, url, store.WithClock(clock))
	require.NoError(t, err)
	t.Cleanup(s.Close)
	db, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return &retentionBundle{testBundle: &testBundle{ctx: ctx, store: s, clock: clock}, db: db}
}

// finished records job id as ended with status st, age ago.
func (b *retentionBundle) finished(t *testing.T, id string, st llmq.Status, age time.Duration) {
	t.Helper()
	_, err := b.store.Jobs().Insert(b.ctx, newJob(t, id))
	require.NoError(t, err)
	_, err = b.db.Exec(b.ctx, `UPDATE jobs SET status = $3, finished_at = $4 WHERE tenant = $1 AND id = $2`,
		"acme", id, st, b.clock.Now().Add(-age))
	require.NoError(t, err)
}

func (b *retentionBundle) letter(t *testing.T, jobID string, age time.Duration, published bool) {
	t.Helper()
	rec, _, err := b.store.DeadLetters().RecordDeadLetter(b.ctx, store.NewDeadLetter{KeyBase: "job:acme/" + jobID, JobID: jobID,
		Tenant: "acme", Reason: "retries_exhausted", Message: []byte(`{}`), CreatedAt: b.clock.Now().Add(-age)})
	require.NoError(t, err)
	if published {
		_, err = b.db.Exec(b.ctx, `UPDATE dead_letters SET published_at = created_at WHERE id = $1`, rec.ID)
		require.NoError(t, err)
	}
}

func (b *retentionBundle) ids(t *testing.T, sql string) []string {
	t.Helper()
	rows, err := b.db.Query(b.ctx, sql)
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// TestPrune: each kind of row goes after its own period, and no sooner; a
// dead-lettered job stays while its letter does; unpublished letters and
// running jobs stay; a pruned job's id cannot be ingested again until its
// tombstone goes.
func TestPrune(t *testing.T) {
	t.Parallel()
	b := setupRetention(t)
	b.finished(t, "ok-old", llmq.StatusSucceeded, 8*day)
	b.finished(t, "ok-old-2", llmq.StatusSucceeded, 7*day+time.Second)
	b.finished(t, "ok-new", llmq.StatusSucceeded, 6*day)
	b.finished(t, "failed-old", llmq.StatusFailed, 31*day)
	b.finished(t, "failed-new", llmq.StatusFailed, 29*day)
	b.finished(t, "expired-old", llmq.StatusExpired, 31*day)
	b.finished(t, "cancelled-old", llmq.StatusCancelled, 31*day)
	b.finished(t, "dl-old", llmq.StatusDeadLettered, 31*day)
	b.finished(t, "dl-old-lettered", llmq.StatusDeadLettered, 31*day)
	b.letter(t, "dl-old-lettered", 10*day, true)
	b.letter(t, "gone-1", 40*day, true)
	b.letter(t, "gone-2", 31*day, true)
	b.letter(t, "gone-3", 35*day, true)
	b.letter(t, "unpublished", 40*day, false)
	_, err := b.store.Jobs().Insert(b.ctx, newJob(t, "queued"))
	require.NoError(t, err)
	_, err = b.db.Exec(b.ctx, `INSERT INTO batches (id, status, ingested_at) VALUES
		('b-old', 'completed', $1), ('b-new', 'completed', $2), ('b-open', 'in_progress', NULL)`,
		b.clock.Now().Add(-31*day), b.clock.Now().Add(-29*day))
	require.NoError(t, err)

	pruned, err := b.store.Prune(b.ctx, retention)
	require.NoError(t, err)
	require.Equal(t, store.Pruned{"jobs": 6, "dead_letters": 3, "batches": 1, "tombstones": 0}, pruned)
	require.ElementsMatch(t, []string{"ok-new", "failed-new", "dl-old-lettered", "queued"},
		b.ids(t, `SELECT id FROM jobs`))
	require.ElementsMatch(t, []string{"ok-old", "ok-old-2", "failed-old", "expired-old", "cancelled-old", "dl-old"},
		b.ids(t, `SELECT id FROM job_tombstones`))
	require.ElementsMatch(t, []string{"dl-old-lettered", "unpublished"}, b.ids(t, `SELECT job_id FROM dead_letters`))
	require.ElementsMatch(t, []string{"b-new", "b-open"}, b.ids(t, `SELECT id FROM batches`))

	// A late duplicate of a pruned job is not recorded again, by any path.
	created, err := b.store.Jobs().Insert(b.ctx, newJob(t, "ok-old"))
	require.NoError(t, err)
	require.False(t, created)
	fresh, err := b.store.Queue().Ingest(b.ctx, []store.NewJob{{Job: newJob(t, "failed-old")}, {Job: newJob(t, "new")}})
	require.NoError(t, err)
	require.Equal(t, []bool{false, true}, fresh)
	rec, err := b.store.Outbox().InsertOutbox(b.ctx, []store.NewJob{{Job: newJob(t, "dl-old")}})
	require.NoError(t, err)
	require.Equal(t, []store.Recorded{{Created: false, Status: ""}}, rec)
	_, err = b.store.Jobs().Get(b.ctx, "acme", "ok-old")
	require.ErrorIs(t, err, store.ErrNotFound)

	// Nothing more is due; then the tombstones' period passes.
	pruned, err = b.store.Prune(b.ctx, retention)
	require.NoError(t, err)
	require.Equal(t, store.Pruned{"jobs": 0, "dead_letters": 0, "batches": 0, "tombstones": 0}, pruned)
	b.clock.Advance(60*day + time.Second)
	pruned, err = b.store.Prune(b.ctx, store.Retention{Tombstones: 60 * day})
	require.NoError(t, err)
	require.Equal(t, store.Pruned{"tombstones": 6}, pruned)
	created, err = b.store.Jobs().Insert(b.ctx, newJob(t, "ok-old"))
	require.NoError(t, err)
	require.True(t, created, "the id is free once its tombstone is gone")

	sizes, err := b.store.TableBytes(b.ctx)
	require.NoError(t, err)
	for _, table := range []string{"jobs", "dead_letters", "batches", "job_tombstones"} {
		require.Positive(t, sizes[table], table)
	}
}

// TestPruneWhileWorkersStore: prunes running beside workers that claim and
// store results delete only jobs that had finished before the period,
// never one being worked on, and every result lands.
func TestPruneWhileWorkersStore(t *testing.T) {
	t.Parallel()
	b := setupRetention(t)
	const n = 200
	for i := range n {
		b.finished(t, fmt.Sprintf("old-%d", i), llmq.StatusSucceeded, 8*day)
	}
	var live []*llmq.Job
	for i := range n {
		live = append(live, newJob(t, fmt.Sprintf("live-%d", i)))
	}
	leases := b.hold(t, "w1", live...)
	require.Len(t, leases, n)

	var wg sync.WaitGroup
	var total int64
	wg.Go(func() {
		for range 20 {
			p, err := b.store.Prune(b.ctx, retention)
			if !assertNoErr(t, err) {
				return
			}
			total += p["jobs"]
		}
	})
	for _, l := range leases {
		wg.Go(func() {
			stored, err := b.store.Queue().StoreResult(b.ctx, l.Key, store.Result{Response: json.RawMessage(`{}`)})
			if assertNoErr(t, err) && !stored {
				t.Errorf("%s: result not stored", l.Key.ID)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, n, total, "the old jobs, once each")
	counts, err := b.store.Jobs().CountByStatus(b.ctx, "acme", 0)
	require.NoError(t, err)
	require.Equal(t, map[llmq.Status]int64{llmq.StatusSucceeded: n}, counts)
}

func assertNoErr(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}
