package store_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// eachOutboxPath runs test with InsertOutbox's statement per job (a few
// jobs) and with its statement over arrays (many).
func eachOutboxPath(t *testing.T, test func(t *testing.T, b *testBundle)) {
	for _, arrays := range []bool{false, true} {
		t.Run(map[bool]string{false: "each", true: "arrays"}[arrays], func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			if arrays {
				store.RecordOutboxAsArrays(b.store)
			}
			test(t, b)
		})
	}
}

func TestOutbox(t *testing.T) {
	t.Parallel()
	eachOutboxPath(t, testOutbox)
}

func testOutbox(t *testing.T, b *testBundle) {
	created, err := b.store.Outbox().InsertOutbox(b.ctx, []store.NewJob{{Job: newJob(t, "o1")}, {Job: newJob(t, "o2")}})
	require.NoError(t, err)
	require.Equal(t, []store.Recorded{{Created: true, Status: llmq.StatusQueued}, {Created: true, Status: llmq.StatusQueued}}, created)
	// A row inserted any other way counts as published (it came from the
	// broker).
	_, err = b.store.Jobs().Insert(b.ctx, newJob(t, "direct"))
	require.NoError(t, err)

	b.clock.Advance(time.Minute)
	_, err = b.store.Jobs().Cancel(b.ctx, "acme", "direct")
	require.NoError(t, err)
	created, err = b.store.Outbox().InsertOutbox(b.ctx, []store.NewJob{{Job: newJob(t, "o1")}, {Job: newJob(t, "o3")}, {Job: newJob(t, "direct")}})
	require.NoError(t, err)
	require.Equal(t, []store.Recorded{{Created: false, Status: llmq.StatusQueued}, {Created: true, Status: llmq.StatusQueued},
		{Created: false, Status: llmq.StatusCancelled}}, created, "an existing job's status is read in the same transaction")

	recs, err := b.store.Outbox().Unpublished(b.ctx, b.clock.Now(), 10)
	require.NoError(t, err)
	require.Equal(t, []string{"o1", "o2"}, outboxIDs(recs), "o3 is younger than the cutoff")

	require.NoError(t, b.store.Outbox().MarkPublished(b.ctx, []store.Key{acme("o1")}))
	_, err = b.store.Jobs().Cancel(b.ctx, "acme", "o2")
	require.NoError(t, err)
	recs, err = b.store.Outbox().Unpublished(b.ctx, b.clock.Now().Add(time.Second), 10)
	require.NoError(t, err)
	require.Equal(t, []string{"o3"}, outboxIDs(recs), "published and cancelled rows are not swept")

	// An invalid job writes nothing.
	bad := newJob(t, "o4")
	bad.Tenant = "bad tenant"
	_, err = b.store.Outbox().InsertOutbox(b.ctx, []store.NewJob{{Job: newJob(t, "o5")}, {Job: bad}})
	require.ErrorIs(t, err, store.ErrInvalidJob)
	_, err = b.store.Jobs().Get(b.ctx, "acme", "o5")
	require.ErrorIs(t, err, store.ErrNotFound)
}

// TestOutboxPublishing: InsertOutboxPublishing hands publish what it
// recorded while the rows are not yet visible to anyone else, then
// commits them published; when publish fails it commits the created rows
// unpublished (the sweeper's), an existing job untouched; an insert that
// fails calls no publish and writes nothing.
func TestOutboxPublishing(t *testing.T) {
	t.Parallel()
	eachOutboxPath(t, testOutboxPublishing)
}

func testOutboxPublishing(t *testing.T, b *testBundle) {
	_, err := b.store.Jobs().Insert(b.ctx, newJob(t, "old"))
	require.NoError(t, err)
	visible := func(id string) bool {
		var n int
		require.NoError(t, b.store.Pool().QueryRow(b.ctx, `SELECT count(*) FROM jobs WHERE id = $1`, id).Scan(&n))
		return n == 1
	}
	publishedAt := func(id string) *time.Time {
		var at *time.Time
		require.NoError(t, b.store.Pool().QueryRow(b.ctx, `SELECT published_at FROM jobs WHERE id = $1`, id).Scan(&at))
		if at != nil {
			*at = at.UTC()
		}
		return at
	}
	oldAt := publishedAt("old")
	want := []store.Recorded{{Created: true, Status: llmq.StatusQueued}, {Created: false, Status: llmq.StatusQueued},
		{Created: true, Status: llmq.StatusQueued}}
	var seen []store.Recorded
	got, err := b.store.Outbox().InsertOutboxPublishing(b.ctx, []store.NewJob{{Job: newJob(t, "p1")}, {Job: newJob(t, "old")},
		{Job: newJob(t, "p2")}}, func(recorded []store.Recorded) error {
		seen = recorded
		require.False(t, visible("p1"), "committed only once published")
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, want, seen)
	now := b.clock.Now()
	for _, id := range []string{"p1", "p2"} {
		require.Equal(t, &now, publishedAt(id), id)
	}
	require.Equal(t, oldAt, publishedAt("old"), "an existing job keeps its mark")

	got, err = b.store.Outbox().InsertOutboxPublishing(b.ctx, []store.NewJob{{Job: newJob(t, "u1")}, {Job: newJob(t, "p1")}},
		func([]store.Recorded) error { return errors.New("broker down") })
	require.NoError(t, err, "recorded all the same")
	require.Equal(t, []store.Recorded{{Created: true, Status: llmq.StatusQueued}, {Created: false, Status: llmq.StatusQueued}}, got)
	require.Nil(t, publishedAt("u1"))
	require.Equal(t, &now, publishedAt("p1"), "an existing job keeps its mark")
	b.clock.Advance(time.Second)
	recs, err := b.store.Outbox().Unpublished(b.ctx, b.clock.Now(), 10)
	require.NoError(t, err)
	require.Equal(t, []string{"u1"}, outboxIDs(recs))

	bad := newJob(t, "bad")
	bad.Tenant = "bad tenant"
	_, err = b.store.Outbox().InsertOutboxPublishing(b.ctx, []store.NewJob{{Job: newJob(t, "p3")}, {Job: bad}},
		func([]store.Recorded) error { t.Fatal("publish of a failed insert"); return nil })
	require.ErrorIs(t, err, store.ErrInvalidJob)
	require.False(t, visible("p3"))

	// A job Postgres refuses (a trigger of this test's database raises a
	// data exception for it) fails the whole transaction, which is rolled
	// back: the connection goes back to the pool idle, not closed, and
	// serves the next flush.
	_, err = b.store.Pool().Exec(b.ctx, `CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.id = 'refused' THEN RAISE EXCEPTION 'refused' USING ERRCODE = '22023'; END IF; RETURN NEW; END $$;
		CREATE TRIGGER refuse BEFORE INSERT ON jobs FOR EACH ROW EXECUTE FUNCTION refuse()`)
	require.NoError(t, err)
	refused := newJob(t, "refused")
	conns := b.store.Pool().Stat().TotalConns()
	_, err = b.store.Outbox().InsertOutboxPublishing(b.ctx, []store.NewJob{{Job: newJob(t, "p4")}, {Job: refused}},
		func([]store.Recorded) error { t.Fatal("publish of a failed insert"); return nil })
	require.ErrorIs(t, err, store.ErrInvalidJob)
	require.False(t, visible("p4"))
	require.Equal(t, conns, b.store.Pool().Stat().TotalConns(), "the connection was rolled back and kept")
	got, err = b.store.Outbox().InsertOutboxPublishing(b.ctx, []store.NewJob{{Job: newJob(t, "p4")}}, func([]store.Recorded) error { return nil })
	require.NoError(t, err)
	require.Equal(t, []store.Recorded{{Created: true, Status: llmq.StatusQueued}}, got)
	require.Equal(t, new(b.clock.Now()), publishedAt("p4"))
}

func TestQueueStats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var jobs []*llmq.Job
	for i := 0; i < 4; i++ {
		jobs = append(jobs, newJob(t, fmt.Sprintf("r%d", i)))
	}
	require.Len(t, b.hold(t, "w", jobs...), 4)
	_, err := b.store.Jobs().Insert(b.ctx, newJob(t, "queued"))
	require.NoError(t, err)
	_, err = b.store.Queue().StoreResult(b.ctx, acme("r0"), store.Result{})
	require.NoError(t, err)
	start := b.clock.Now()
	st, err := b.store.Queue().QueueStats(b.ctx, start, 0)
	require.NoError(t, err)
	require.True(t, start.Equal(st.FirstFinished), "r0 finished at %v, not %v", start, st.FirstFinished)
	st.FirstFinished = time.Time{}
	require.Equal(t, store.QueueStats{Queued: 1, InFlight: 3, Finished: 1, Consuming: true}, st, "leases live")
	b.clock.Advance(time.Minute)
	_, err = b.store.Queue().StoreResult(b.ctx, acme("r1"), store.Result{})
	require.NoError(t, err)
	st, err = b.store.Queue().QueueStats(b.ctx, start.Add(time.Second), 0)
	require.NoError(t, err)
	require.True(t, start.Add(time.Minute).Equal(st.FirstFinished), "r1 is the first in the window")
	st.FirstFinished = time.Time{}
	require.Equal(t, store.QueueStats{Queued: 1, InFlight: 2, Finished: 1}, st, "the leases expired: nobody consumes")
	require.NoError(t, b.store.Queue().SetModelState(b.ctx, store.ModelState{Model: "big", WaitingReason: store.WaitingReasonProviderQuota, Worker: "w"}))
	st, err = b.store.Queue().QueueStats(b.ctx, start.Add(time.Second), 0)
	require.NoError(t, err)
	require.True(t, st.Consuming, "a scheduler wrote its model state")
	b.clock.Advance(store.ModelStateTTL)
	st, err = b.store.Queue().QueueStats(b.ctx, start.Add(time.Second), 0)
	require.NoError(t, err)
	require.False(t, st.Consuming, "its model state is old")
	n, err := b.store.Queue().QueuedCount(b.ctx, 10)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	_, err = b.store.Jobs().Insert(b.ctx, newJob(t, "second"))
	require.NoError(t, err)
	n, err = b.store.Queue().QueuedCount(b.ctx, 1)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "counted up to the limit")
	st, err = b.store.Queue().QueueStats(b.ctx, start.Add(time.Second), 1)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Queued, "2 queued, counted up to the limit")
	st, err = b.store.Queue().QueueStats(b.ctx, start.Add(time.Second), 0)
	require.NoError(t, err)
	require.EqualValues(t, 2, st.Queued, "no limit")
	models, err := b.store.Queue().QueuedModels(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"big"}, models)
	require.NoError(t, b.store.Ping(b.ctx))
}

func TestListAllTenants(t *testing.T) {
	t.Parallel()
	b := setup(t)
	running := newJob(t, "r0")
	running.Tenant = "initech"
	require.Len(t, b.hold(t, "w", running), 1)
	b.clock.Advance(time.Second)
	for i, tenant := range []string{"acme", "globex", "acme"} {
		j := newJob(t, fmt.Sprintf("l%d", i))
		j.Tenant = tenant
		_, err := b.store.Jobs().Insert(b.ctx, j)
		require.NoError(t, err)
		b.clock.Advance(time.Second)
	}
	page, next, err := b.store.Jobs().List(b.ctx, store.ListOptions{AllTenants: true, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"l2", "l1"}, outboxIDs(page))
	page, next, err = b.store.Jobs().List(b.ctx, store.ListOptions{AllTenants: true, Limit: 2, After: next})
	require.NoError(t, err)
	require.Equal(t, []string{"l0", "r0"}, outboxIDs(page))
	require.Empty(t, next)
	page, _, err = b.store.Jobs().List(b.ctx, store.ListOptions{AllTenants: true, Tenant: "globex"})
	require.NoError(t, err)
	require.Equal(t, []string{"l1"}, outboxIDs(page))
	// One status across tenants: each tenant's newest, merged.
	page, _, err = b.store.Jobs().List(b.ctx, store.ListOptions{AllTenants: true, Status: llmq.StatusRunning})
	require.NoError(t, err)
	require.Equal(t, []string{"r0"}, outboxIDs(page))
	page, next, err = b.store.Jobs().List(b.ctx, store.ListOptions{AllTenants: true, Status: llmq.StatusQueued, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"l2", "l1"}, outboxIDs(page))
	page, next, err = b.store.Jobs().List(b.ctx, store.ListOptions{AllTenants: true, Status: llmq.StatusQueued, Limit: 2, After: next})
	require.NoError(t, err)
	require.Equal(t, []string{"l0"}, outboxIDs(page))
	require.Empty(t, next)
	page, _, err = b.store.Jobs().List(b.ctx, store.ListOptions{AllTenants: true, Status: llmq.StatusFailed})
	require.NoError(t, err)
	require.Empty(t, page)
	_, _, err = b.store.Jobs().List(b.ctx, store.ListOptions{AllTenants: true, After: "zz"})
	require.ErrorIs(t, err, store.ErrBadCursor)
	_, _, err = b.store.Jobs().List(b.ctx, store.ListOptions{})
	require.ErrorContains(t, err, "a tenant is required", "never every tenant by accident")
}

func outboxIDs(recs []*store.JobRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	return out
}

// TestOutboxRepeatedKey: a key twice in one call is recorded once, by its
// first job; the repeat reads not created, with the first one's status.
func TestOutboxRepeatedKey(t *testing.T) {
	t.Parallel()
	eachOutboxPath(t, testOutboxRepeatedKey)
}

func testOutboxRepeatedKey(t *testing.T, b *testBundle) {
	_, err := b.store.Jobs().Insert(b.ctx, newJob(t, "old"))
	require.NoError(t, err)
	_, err = b.store.Jobs().Cancel(b.ctx, "acme", "old")
	require.NoError(t, err)
	got, err := b.store.Outbox().InsertOutbox(b.ctx, []store.NewJob{{Job: newJob(t, "a")}, {Job: newJob(t, "old")},
		{Job: newJob(t, "a")}, {Job: newJob(t, "b")}, {Job: newJob(t, "old")}})
	require.NoError(t, err)
	require.Equal(t, []store.Recorded{{Created: true, Status: llmq.StatusQueued}, {Status: llmq.StatusCancelled},
		{Status: llmq.StatusQueued}, {Created: true, Status: llmq.StatusQueued}, {Status: llmq.StatusCancelled}}, got)
}

// TestOutboxKeyCommittedMeanwhile: a job another transaction records while
// InsertOutbox waits on its key is reported not created, with its status
// (the statement's snapshot does not see it: it is read again).
func TestOutboxKeyCommittedMeanwhile(t *testing.T) {
	t.Parallel()
	eachOutboxPath(t, testOutboxKeyCommittedMeanwhile)
}

func testOutboxKeyCommittedMeanwhile(t *testing.T, b *testBundle) {
	tx, err := b.store.Pool().Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	_, err = tx.Exec(b.ctx, `INSERT INTO jobs (tenant, id, status, priority, requested_model, body, sched_key)
		VALUES ('acme', 'race', 'cancelled', 'normal', 'gpt-4o-mini', '{}', now())`)
	require.NoError(t, err)
	type answer struct {
		got []store.Recorded
		err error
	}
	done := make(chan answer, 1)
	go func() {
		got, err := b.store.Outbox().InsertOutbox(b.ctx, []store.NewJob{{Job: newJob(t, "race")}, {Job: newJob(t, "free")}})
		done <- answer{got, err}
	}()
	// InsertOutbox waits on the uncommitted key; then the key commits.
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, b.store.Pool().QueryRow(b.ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO jobs%')`).Scan(&waiting))
		return waiting
	}, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, tx.Commit(b.ctx))
	a := <-done
	require.NoError(t, a.err)
	require.Equal(t, []store.Recorded{{Status: llmq.StatusCancelled}, {Created: true, Status: llmq.StatusQueued}}, a.got)
}
