package store_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

func newLetter(jobID, tenant, reason string) store.NewDeadLetter {
	return store.NewDeadLetter{
		KeyBase: "job:" + tenant + "/" + jobID, JobID: jobID, Tenant: tenant, Reason: reason,
		LastError: "rate_limited: 429", Attempts: 8, Model: "big",
		Message: []byte(`{"id":"` + jobID + `"}`), MessageKey: []byte(tenant),
		Headers: map[string]string{"h": "v"}, Source: "jobs/3/42", Destination: "jobs.dlq",
	}
}

func TestRecordDeadLetterIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	recs := make([]*store.DeadLetter, 8)
	created := make([]bool, 8)
	errs := make([]error, 8)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range recs {
		wg.Go(func() {
			<-start
			recs[i], created[i], errs[i] = b.store.DeadLetters().RecordDeadLetter(b.ctx, newLetter("j1", "acme", "retries_exhausted"))
		})
	}
	close(start)
	wg.Wait()
	wins := 0
	for i := range recs {
		require.NoError(t, errs[i])
		require.Equal(t, recs[0].ID, recs[i].ID)
		if created[i] {
			wins++
		}
	}
	require.Equal(t, 1, wins)
	d := recs[0]
	require.Equal(t, "job:acme/j1:0", d.LetterKey)
	require.Equal(t, "acme", d.Tenant)
	require.Equal(t, []byte(`{"id":"j1"}`), d.Message)
	require.Equal(t, []byte("acme"), d.MessageKey)
	require.Equal(t, map[string]string{"h": "v"}, d.Headers)
	require.Equal(t, "big", d.Model)
	require.Equal(t, 8, d.Attempts)
	require.WithinDuration(t, b.clock.Now(), d.CreatedAt, 0)
	require.Nil(t, d.PublishedAt)

	set, err := b.store.DeadLetters().MarkDeadLetterPublished(b.ctx, d.ID)
	require.NoError(t, err)
	require.True(t, set)
	set, err = b.store.DeadLetters().MarkDeadLetterPublished(b.ctx, d.ID)
	require.NoError(t, err)
	require.False(t, set)
	_, err = b.store.DeadLetters().MarkDeadLetterPublished(b.ctx, d.ID+100)
	require.ErrorIs(t, err, store.ErrDeadLetterNotFound)

	// A poison message without id: an empty tenant is the default one.
	p := store.NewDeadLetter{KeyBase: "msg:abc", Reason: "poison", Message: []byte("not json")}
	pd, created1, err := b.store.DeadLetters().RecordDeadLetter(b.ctx, p)
	require.NoError(t, err)
	require.True(t, created1)
	require.Equal(t, llmq.DefaultTenant, pd.Tenant)
	require.Equal(t, []byte{}, pd.MessageKey)
	again, created2, err := b.store.DeadLetters().RecordDeadLetter(b.ctx, p)
	require.NoError(t, err)
	require.False(t, created2)
	require.Equal(t, pd.ID, again.ID)

	// After a replay, the same job dead-lettered again is a new letter.
	_, begun, err := b.store.DeadLetters().BeginReplay(b.ctx, "", d.ID)
	require.NoError(t, err)
	require.True(t, begun)
	d2, created3, err := b.store.DeadLetters().RecordDeadLetter(b.ctx, newLetter("j1", "acme", "retries_exhausted"))
	require.NoError(t, err)
	require.True(t, created3)
	require.Equal(t, "job:acme/j1:1", d2.LetterKey)
}

func TestReplayOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d, _, err := b.store.DeadLetters().RecordDeadLetter(b.ctx, newLetter("j1", "acme", "retries_exhausted"))
	require.NoError(t, err)

	_, _, err = b.store.DeadLetters().BeginReplay(b.ctx, "other", d.ID)
	require.ErrorIs(t, err, store.ErrDeadLetterNotFound)

	begun := make([]bool, 8)
	errs := make([]error, 8)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range begun {
		wg.Go(func() {
			<-start
			_, begun[i], errs[i] = b.store.DeadLetters().BeginReplay(b.ctx, "acme", d.ID)
		})
	}
	close(start)
	wg.Wait()
	n := 0
	for i := range begun {
		require.NoError(t, errs[i])
		if begun[i] {
			n++
		}
	}
	require.Equal(t, 1, n)
	got, err := b.store.DeadLetters().GetDeadLetter(b.ctx, "acme", d.ID)
	require.NoError(t, err)
	require.Equal(t, 1, got.ReplayCount)
	require.WithinDuration(t, b.clock.Now(), *got.ReplayedAt, 0)
	require.Nil(t, got.ReplayPublishedAt)

	b.clock.Advance(time.Minute)
	pending, err := b.store.DeadLetters().UnfinishedReplays(b.ctx, b.clock.Now(), 10)
	require.NoError(t, err)
	require.Len(t, pending, 1)
	set, err := b.store.DeadLetters().MarkReplayPublished(b.ctx, d.ID)
	require.NoError(t, err)
	require.True(t, set)
	set, err = b.store.DeadLetters().MarkReplayPublished(b.ctx, d.ID)
	require.NoError(t, err)
	require.False(t, set)
	pending, err = b.store.DeadLetters().UnfinishedReplays(b.ctx, b.clock.Now(), 10)
	require.NoError(t, err)
	require.Empty(t, pending)
}

func TestListAndPurgeDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	t0 := b.clock.Now()
	var acme []int64 // newest first
	for i := range 12 {
		tenant, reason := "acme", "retries_exhausted"
		if i%4 == 3 {
			tenant = "other"
		}
		if i%3 == 0 {
			reason = "poison"
		}
		d, _, err := b.store.DeadLetters().RecordDeadLetter(b.ctx, newLetter(fmt.Sprintf("j%02d", i), tenant, reason))
		require.NoError(t, err)
		if tenant == "acme" {
			acme = append([]int64{d.ID}, acme...)
		}
		if i%2 == 1 { // pairs share a created_at: the id breaks the tie
			b.clock.Advance(time.Second)
		}
	}

	var got []int64
	cursor, pages := "", 0
	for {
		recs, next, err := b.store.DeadLetters().ListDeadLetters(b.ctx, store.DeadLetterListOptions{
			DeadLetterFilter: store.DeadLetterFilter{Tenant: "acme"}, Limit: 4, After: cursor,
		})
		require.NoError(t, err)
		pages++
		for _, r := range recs {
			got = append(got, r.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	require.Equal(t, 3, pages)
	require.Equal(t, acme, got)

	count := func(f store.DeadLetterFilter) int {
		recs, next, err := b.store.DeadLetters().ListDeadLetters(b.ctx, store.DeadLetterListOptions{DeadLetterFilter: f})
		require.NoError(t, err)
		require.Equal(t, "", next)
		return len(recs)
	}
	require.Equal(t, 12, count(store.DeadLetterFilter{}))
	require.Equal(t, 4, count(store.DeadLetterFilter{Reason: "poison"}))
	require.Equal(t, 3, count(store.DeadLetterFilter{Reason: "poison", Tenant: "acme"}))
	require.Equal(t, 1, count(store.DeadLetterFilter{JobID: "j05"}))
	require.Equal(t, 2, count(store.DeadLetterFilter{IDs: acme[:2]}))
	// j02..j05 were created at t0+1s and t0+2s.
	require.Equal(t, 4, count(store.DeadLetterFilter{Since: t0.Add(time.Second), Until: t0.Add(3 * time.Second)}))

	_, _, err := b.store.DeadLetters().ListDeadLetters(b.ctx, store.DeadLetterListOptions{After: "!!"})
	require.ErrorIs(t, err, store.ErrBadCursor)

	_, err = b.store.DeadLetters().PurgeDeadLetters(b.ctx, store.DeadLetterFilter{})
	require.ErrorIs(t, err, store.ErrEmptyFilter)
	require.Equal(t, 12, count(store.DeadLetterFilter{}))
	n, err := b.store.DeadLetters().PurgeDeadLetters(b.ctx, store.DeadLetterFilter{Reason: "poison", Tenant: "acme"})
	require.NoError(t, err)
	require.Equal(t, int64(3), n)
	require.Equal(t, 9, count(store.DeadLetterFilter{}))
	n, err = b.store.DeadLetters().PurgeDeadLetters(b.ctx, store.DeadLetterFilter{All: true})
	require.NoError(t, err)
	require.Equal(t, int64(9), n)
}

func TestUnpublishedDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d1, _, err := b.store.DeadLetters().RecordDeadLetter(b.ctx, newLetter("j1", "acme", "poison"))
	require.NoError(t, err)
	d2, _, err := b.store.DeadLetters().RecordDeadLetter(b.ctx, newLetter("j2", "acme", "poison"))
	require.NoError(t, err)
	_, err = b.store.DeadLetters().MarkDeadLetterPublished(b.ctx, d2.ID)
	require.NoError(t, err)
	b.clock.Advance(time.Minute)
	d3, _, err := b.store.DeadLetters().RecordDeadLetter(b.ctx, newLetter("j3", "acme", "poison"))
	require.NoError(t, err)

	recs, err := b.store.DeadLetters().UnpublishedDeadLetters(b.ctx, b.clock.Now().Add(-30*time.Second), 10)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, d1.ID, recs[0].ID)
	recs, err = b.store.DeadLetters().UnpublishedDeadLetters(b.ctx, b.clock.Now().Add(time.Second), 10)
	require.NoError(t, err)
	require.Equal(t, []int64{d1.ID, d3.ID}, []int64{recs[0].ID, recs[1].ID})
}

func TestRequeue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	l := b.hold(t, "w1", newJob(t, "j1"))["j1"]
	_, err := b.store.Queue().MarkCalling(b.ctx, l, store.PolicyState{Retries: 2, ModelIndex: 1, FreeAttempts: 3})
	require.NoError(t, err)
	held := newLetter("j1", "acme", "retries_exhausted")
	held.LeaseToken = l.Token
	_, created, err := b.store.DeadLetters().RecordDeadLetter(b.ctx, held)
	require.NoError(t, err)
	require.True(t, created)
	rec := b.get(t, "j1")
	require.Equal(t, llmq.StatusDeadLettered, rec.Status, "the holder's letter ends the job in the same transaction")
	require.Equal(t, "retries_exhausted", rec.ErrorCode)
	_, created, err = b.store.DeadLetters().RecordDeadLetter(b.ctx, held)
	require.NoError(t, err)
	require.False(t, created, "recording the holder's letter again is harmless")

	rec, err = b.store.DeadLetters().Requeue(b.ctx, "acme", "j1")
	require.NoError(t, err)
	require.Equal(t, llmq.StatusQueued, rec.Status)
	require.Equal(t, []int{0, 0, 0, 0}, []int{rec.Attempts, rec.Retries, rec.ModelIndex, rec.FreeAttempts})
	require.Equal(t, "", rec.ErrorCode)
	require.Nil(t, rec.FinishedAt)
	require.Nil(t, rec.StartedAt)
	require.Equal(t, "", rec.LeaseOwner)
	require.Equal(t, store.LaneReasonReplayed, rec.LaneReason)

	// Already queued: unchanged, no error (a resumed replay).
	rec, err = b.store.DeadLetters().Requeue(b.ctx, "acme", "j1")
	require.NoError(t, err)
	require.Equal(t, llmq.StatusQueued, rec.Status)

	// The requeued job runs again from attempt 1.
	l = b.hold(t, "w2")["j1"]
	attempts, err := b.store.Queue().MarkCalling(b.ctx, l, store.PolicyState{})
	require.NoError(t, err)
	require.Equal(t, 1, attempts)
	_, err = b.store.DeadLetters().Requeue(b.ctx, "acme", "j1")
	var ite *store.IllegalTransitionError
	require.ErrorAs(t, err, &ite)
	require.Equal(t, llmq.StatusRunning, ite.From)

	_, err = b.store.Queue().StoreResult(b.ctx, l.Key, store.Result{})
	require.NoError(t, err)
	_, err = b.store.DeadLetters().Requeue(b.ctx, "acme", "j1")
	require.ErrorIs(t, err, store.ErrTerminal)

	_, err = b.store.DeadLetters().Requeue(b.ctx, "acme", "missing")
	require.ErrorIs(t, err, store.ErrNotFound)
}

// TestCountDeadLetters: letters count by reason in the tenant and window
// asked, replayed or not; the jobs with a letter of a reason count once.
func TestCountDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	t0 := b.clock.Now()
	for _, l := range []store.NewDeadLetter{newLetter("j1", "acme", "poison"), newLetter("j2", "acme", "retries_exhausted"),
		newLetter("j3", "other", "poison")} {
		_, _, err := b.store.DeadLetters().RecordDeadLetter(b.ctx, l)
		require.NoError(t, err)
		b.clock.Advance(time.Second)
	}
	second := newLetter("j1", "acme", "poison")
	second.KeyBase += "/again"
	rec, _, err := b.store.DeadLetters().RecordDeadLetter(b.ctx, second)
	require.NoError(t, err)
	_, begun, err := b.store.DeadLetters().BeginReplay(b.ctx, "acme", rec.ID)
	require.NoError(t, err)
	require.True(t, begun)
	at := func(d time.Duration) *time.Time { x := t0.Add(d); return &x }

	counts, err := b.store.DeadLetters().CountDeadLetters(b.ctx, "acme", time.Time{}, time.Time{})
	require.NoError(t, err)
	for i := range counts {
		counts[i].NewestAt = at(counts[i].NewestAt.Sub(t0)) // in the clock's location
	}
	require.ElementsMatch(t, []store.DeadLetterCount{{Reason: "poison", Count: 2, NotReplayed: 1, NewestAt: at(3 * time.Second)},
		{Reason: "retries_exhausted", Count: 1, NotReplayed: 1, NewestAt: at(time.Second)}}, counts)
	counts, err = b.store.DeadLetters().CountDeadLetters(b.ctx, "", t0.Add(time.Second), t0.Add(3*time.Second))
	require.NoError(t, err)
	require.Len(t, counts, 2, "[1 s, 3 s): j2's letter and other's")
	for _, c := range counts {
		require.Equal(t, int64(1), c.Count, c.Reason)
	}
	n, err := b.store.Jobs().CountDeadLetteredJobs(b.ctx, []string{"j1", "j2", "j3"}, "poison")
	require.NoError(t, err)
	require.Equal(t, 2, n, "j1 (twice) and j3")
}
