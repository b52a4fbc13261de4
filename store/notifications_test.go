package store_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

func withReply(j *llmq.Job, to string) *llmq.Job {
	j.ReplyTo = &llmq.Reply{To: to, CorrelationID: "c-" + j.ID, Headers: map[string]string{"h": "v"}}
	return j
}

// TestNotificationsWrittenWithTheEnd: every statement that ends a job
// with a route writes one notifications row with the job's terminal
// status in the same statement; a job without a route writes none.
func TestNotificationsWrittenWithTheEnd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ns := b.store.Notifications()
	ls := b.hold(t, "w1", withReply(newJob(t, "ok"), "replies"), withReply(newJob(t, "bad"), "replies"),
		withReply(newJob(t, "late"), "replies"), withReply(newJob(t, "dead"), "replies"), newJob(t, "plain"))
	for _, id := range []string{"cancel", "poison", "overdue"} {
		_, err := b.store.Jobs().Insert(b.ctx, withReply(newJob(t, id), "replies"))
		require.NoError(t, err)
	}
	key := func(id string) store.Key { return store.Key{Tenant: "acme", ID: id} }
	_, err := b.store.Queue().StoreResult(b.ctx, key("ok"), store.Result{Response: []byte(`{"id":"c1"}`), UsedModel: "big",
		PromptTokens: 3, CompletionTokens: 4, CostUSD: 0.5})
	require.NoError(t, err)
	_, err = b.store.Queue().StoreResult(b.ctx, key("plain"), store.Result{Response: []byte(`{"id":"c2"}`), UsedModel: "big"})
	require.NoError(t, err)
	require.NoError(t, b.store.Queue().MarkFailed(b.ctx, ls["bad"], 400, "invalid_request_error", "bad"))
	require.NoError(t, b.store.Queue().MarkExpired(b.ctx, ls["late"], "too late"))
	d := newLetter("dead", "acme", "retries_exhausted")
	d.LeaseToken = ls["dead"].Token
	_, _, err = b.store.DeadLetters().RecordDeadLetter(b.ctx, d)
	require.NoError(t, err)
	_, err = b.store.Jobs().Cancel(b.ctx, "acme", "cancel")
	require.NoError(t, err)
	require.NoError(t, b.store.DeadLetters().MarkDeadLettered(b.ctx, key("poison"), "unpublishable", "no"))
	b.clock.Advance(366 * 24 * time.Hour)
	_, err = b.store.Queue().ExpireOverdue(b.ctx)
	require.NoError(t, err)
	// A second result for a finished job writes nothing more.
	_, err = b.store.Queue().StoreResult(b.ctx, key("ok"), store.Result{Response: []byte(`{"id":"c3"}`), UsedModel: "big"})
	require.NoError(t, err)

	got, err := ns.List(b.ctx, store.NotificationFilter{Tenant: "acme"})
	require.NoError(t, err)
	status := map[string]llmq.Status{}
	for _, n := range got {
		_, dup := status[n.JobID]
		require.False(t, dup, "two notifications for %s", n.JobID)
		status[n.JobID] = n.Status
		require.Equal(t, llmq.Reply{To: "replies", CorrelationID: "c-" + n.JobID, Headers: map[string]string{"h": "v"}}, n.Reply)
		require.NotEmpty(t, n.EventID)
	}
	require.Equal(t, map[string]llmq.Status{
		"ok": llmq.StatusSucceeded, "bad": llmq.StatusFailed, "late": llmq.StatusExpired, "dead": llmq.StatusDeadLettered,
		"cancel": llmq.StatusCancelled, "poison": llmq.StatusDeadLettered, "overdue": llmq.StatusExpired,
	}, status)
}

// TestNotificationsGroupCommit: results stored concurrently, which the
// group committer merges into statements over arrays, write one
// notification per job with a route and none for the others.
func TestNotificationsGroupCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var jobs []*llmq.Job
	for i := range 200 {
		j := newJob(t, fmt.Sprintf("j%03d", i))
		if i%2 == 0 {
			withReply(j, "replies")
		}
		jobs = append(jobs, j)
	}
	b.hold(t, "w1", jobs...)
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Go(func() {
			_, err := b.store.Queue().StoreResult(b.ctx, store.Key{Tenant: "acme", ID: j.ID}, store.Result{Response: []byte(`{}`), UsedModel: "big"})
			require.NoError(t, err)
		})
	}
	wg.Wait()
	got, err := b.store.Notifications().List(b.ctx, store.NotificationFilter{Limit: 1000})
	require.NoError(t, err)
	require.Len(t, got, 100)
	for _, n := range got {
		var i int
		_, err := fmt.Sscanf(n.JobID, "j%03d", &i)
		require.NoError(t, err)
		require.Zero(t, i%2, n.JobID)
	}
}

// TestNotificationLifecycle: a claim takes due rows once (the lease hides
// them from a second claim), carries the job, and a failed delivery
// comes back at its next attempt; past the retry period the row is dead
// with notification_undeliverable while the job keeps its status; a
// replay makes it due again with the same event id; once delivered it is
// gone.
func TestNotificationLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ns := b.store.Notifications()
	b.hold(t, "w1", withReply(newJob(t, "ok"), "replies"))
	_, err := b.store.Queue().StoreResult(b.ctx, store.Key{Tenant: "acme", ID: "ok"}, store.Result{Response: []byte(`{"id":"c1"}`),
		UsedModel: "big", PromptTokens: 3, CompletionTokens: 4, CostUSD: 0.5})
	require.NoError(t, err)
	now := b.clock.Now()
	claimed, err := ns.Claim(b.ctx, now, time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	n := claimed[0]
	require.Equal(t, 1, n.Attempts)
	e := n.Event()
	raw, err := json.Marshal(e)
	require.NoError(t, err)
	require.JSONEq(t, fmt.Sprintf(`{"type":"llmq.job.finished","version":1,"event_id":%q,"job_id":"ok","tenant":"acme",
		"status":"succeeded","correlation_id":"c-ok","model":"big","response":{"id":"c1"},
		"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7},"cost_usd":0.5,"attempts":0,
		"metadata":{"k":"v"},"created_at":"2026-11-30T12:00:00Z","finished_at":"2026-11-30T12:00:00Z"}`, n.EventID), string(raw))

	again, err := ns.Claim(b.ctx, now, time.Minute, 10)
	require.NoError(t, err)
	require.Empty(t, again, "a held notification is claimed once")
	require.NoError(t, ns.Settle(b.ctx, claimed, map[string]store.Failure{n.EventID: {At: now, Error: "broker down", Next: now.Add(5 * time.Second)}}))
	again, err = ns.Claim(b.ctx, now.Add(4*time.Second), time.Minute, 10)
	require.NoError(t, err)
	require.Empty(t, again)
	again, err = ns.Claim(b.ctx, now.Add(5*time.Second), time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.Equal(t, 2, again[0].Attempts)
	require.Equal(t, n.EventID, again[0].EventID)

	require.NoError(t, ns.Settle(b.ctx, again, map[string]store.Failure{n.EventID: {At: now.Add(25 * time.Hour), Error: "still down", Dead: true}}))
	dead, err := ns.List(b.ctx, store.NotificationFilter{State: store.NotificationDead})
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, store.NotificationUndeliverable, dead[0].DeadReason)
	require.Equal(t, "still down", dead[0].LastError)
	rec, err := b.store.Jobs().Get(b.ctx, "acme", "ok")
	require.NoError(t, err)
	require.Equal(t, llmq.StatusSucceeded, rec.Status)
	none, err := ns.Claim(b.ctx, now.Add(48*time.Hour), time.Minute, 10)
	require.NoError(t, err)
	require.Empty(t, none, "a dead notification is not claimed")

	_, err = ns.Replay(b.ctx, "other", n.EventID, now)
	require.ErrorIs(t, err, store.ErrNotificationNotFound)
	replayed, err := ns.Replay(b.ctx, "acme", n.EventID, now.Add(48*time.Hour))
	require.NoError(t, err)
	require.Nil(t, replayed.DeadAt)
	again, err = ns.Claim(b.ctx, now.Add(48*time.Hour), time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.Equal(t, n.EventID, again[0].EventID)
	bl, err := ns.Backlog(b.ctx)
	require.NoError(t, err)
	require.Equal(t, store.NotificationBacklog{Pending: 1, Oldest: n.CreatedAt}, bl)
	require.NoError(t, ns.Settle(b.ctx, again, nil))
	left, err := ns.List(b.ctx, store.NotificationFilter{})
	require.NoError(t, err)
	require.Empty(t, left, "a delivered notification leaves the outbox")
	bl, err = ns.Backlog(b.ctx)
	require.NoError(t, err)
	require.Equal(t, store.NotificationBacklog{}, bl)
}

// expireWithRoutes records jobs ids with a route and ends them in one
// statement (ExpireOverdue): one batch of events.
func expireWithRoutes(t *testing.T, b *testBundle, ids ...string) {
	t.Helper()
	for _, id := range ids {
		_, err := b.store.Jobs().Insert(b.ctx, withReply(newJob(t, id), "replies"))
		require.NoError(t, err)
	}
	b.clock.Advance(366 * 24 * time.Hour) // past the jobs' deadline
	expired, err := b.store.Queue().ExpireOverdue(b.ctx)
	require.NoError(t, err)
	require.Len(t, expired, len(ids))
}

// TestNotificationReplayDead: ReplayDead makes due again the dead events
// of one tenant (or of one job), and no pending one, which keeps its next
// attempt.
func TestNotificationReplayDead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ns := b.store.Notifications()
	for _, k := range []store.Key{{Tenant: "acme", ID: "a1"}, {Tenant: "acme", ID: "a2"}, {Tenant: "globex", ID: "g1"}, {Tenant: "acme", ID: "p1"}} {
		j := withReply(newJob(t, k.ID), "replies")
		j.Tenant = k.Tenant
		_, err := b.store.Jobs().Insert(b.ctx, j)
		require.NoError(t, err)
	}
	b.clock.Advance(366 * 24 * time.Hour)
	_, err := b.store.Queue().ExpireOverdue(b.ctx)
	require.NoError(t, err)
	now := b.clock.Now()
	claimed, err := ns.Claim(b.ctx, now, time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, claimed, 4)
	failed := map[string]store.Failure{}
	for _, n := range claimed {
		f := store.Failure{At: now, Error: "gone", Dead: true}
		if n.JobID == "p1" {
			f = store.Failure{At: now, Error: "down", Next: now.Add(time.Hour)}
		}
		failed[n.EventID] = f
	}
	require.NoError(t, ns.Settle(b.ctx, claimed, failed))
	states := func() map[string]string {
		all, err := ns.List(b.ctx, store.NotificationFilter{})
		require.NoError(t, err)
		out := map[string]string{}
		for _, n := range all {
			out[n.JobID] = "pending"
			if n.DeadAt != nil {
				out[n.JobID] = "dead"
			}
		}
		return out
	}
	require.Equal(t, map[string]string{"a1": "dead", "a2": "dead", "g1": "dead", "p1": "pending"}, states())

	replayed, err := ns.ReplayDead(b.ctx, "acme", "", now)
	require.NoError(t, err)
	require.Equal(t, int64(2), replayed)
	require.Equal(t, map[string]string{"a1": "pending", "a2": "pending", "g1": "dead", "p1": "pending"}, states())
	replayed, err = ns.ReplayDead(b.ctx, "", "g1", now)
	require.NoError(t, err)
	require.Equal(t, int64(1), replayed)
	replayed, err = ns.ReplayDead(b.ctx, "", "", now)
	require.NoError(t, err)
	require.Zero(t, replayed, "nothing is dead")

	due, err := ns.Claim(b.ctx, now, time.Minute, 10)
	require.NoError(t, err)
	got := map[string]int{}
	for _, n := range due {
		got[n.JobID] = n.Attempts
	}
	require.Equal(t, map[string]int{"a1": 2, "a2": 2, "g1": 2}, got, "p1 waits for its next attempt")
}

// TestNotificationBatchSettled: the events of one ending statement are
// claimed together; settled, the delivered ones leave the outbox and a
// failed one stays as a row of its own with its event id and attempts,
// claimed again at its next attempt. A batch settled a second time (its
// lease passed and another notifier claimed it) writes nothing twice.
func TestNotificationBatchSettled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ns := b.store.Notifications()
	expireWithRoutes(t, b, "a", "b", "c")
	now := b.clock.Now()
	claimed, err := ns.Claim(b.ctx, now, time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, claimed, 3)
	ids := map[string]string{}
	for _, n := range claimed {
		require.Equal(t, 1, n.Attempts)
		require.Equal(t, llmq.StatusExpired, n.Status)
		ids[n.JobID] = n.EventID
	}
	require.Len(t, ids, 3)
	failed := map[string]store.Failure{ids["b"]: {At: now, Error: "broker down", Next: now.Add(5 * time.Second)}}
	require.NoError(t, ns.Settle(b.ctx, claimed, failed))
	left, err := ns.List(b.ctx, store.NotificationFilter{})
	require.NoError(t, err)
	require.Len(t, left, 1, "the delivered events left with their batch")
	require.Equal(t, ids["b"], left[0].EventID)
	require.Equal(t, 1, left[0].Attempts)
	require.Equal(t, "broker down", left[0].LastError)
	require.Equal(t, now.Add(5*time.Second), left[0].NextAttempt.UTC())

	require.NoError(t, ns.Settle(b.ctx, claimed, failed), "settled again")
	again, err := ns.Claim(b.ctx, now.Add(5*time.Second), time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.Equal(t, ids["b"], again[0].EventID)
	require.Equal(t, 2, again[0].Attempts)
	bl, err := ns.Backlog(b.ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), bl.Pending)
}

// TestNotificationClaimBatches: a claim takes whole batches until they
// hold its limit of events or more, in the order they were written, and
// locks no other; the list and the backlog count their events.
func TestNotificationClaimBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ns := b.store.Notifications()
	expireWithRoutes(t, b, "a1", "a2")
	expireWithRoutes(t, b, "b1", "b2")
	expireWithRoutes(t, b, "c1", "c2")
	bl, err := ns.Backlog(b.ctx)
	require.NoError(t, err)
	require.Equal(t, int64(6), bl.Pending)
	pending, err := ns.List(b.ctx, store.NotificationFilter{State: store.NotificationPending, JobID: "b2"})
	require.NoError(t, err)
	require.Len(t, pending, 1)

	jobs := func(ns []*store.Notification) []string {
		var out []string
		for _, n := range ns {
			out = append(out, n.JobID)
		}
		return out
	}
	now := b.clock.Now()
	first, err := ns.Claim(b.ctx, now, time.Minute, 3)
	require.NoError(t, err)
	require.Equal(t, []string{"a1", "a2", "b1", "b2"}, jobs(first))
	// It locked the two batches it took and not the third (a row only
	// locked keeps its locker's xmax).
	var lockedOnly int
	require.NoError(t, b.store.Pool().QueryRow(b.ctx,
		`SELECT count(*) FROM notification_batches WHERE claimed_until IS NULL AND xmax::text <> '0'`).Scan(&lockedOnly))
	require.Zero(t, lockedOnly, "batches locked and not claimed")
	second, err := ns.Claim(b.ctx, now, time.Minute, 3)
	require.NoError(t, err)
	require.Equal(t, []string{"c1", "c2"}, jobs(second))
	none, err := ns.Claim(b.ctx, now, time.Minute, 3)
	require.NoError(t, err)
	require.Empty(t, none)
}

// TestNotificationClaimTakesBoth: a claim takes events being retried and
// new batches alike, so neither waits behind a stream of the other.
func TestNotificationClaimTakesBoth(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ns := b.store.Notifications()
	expireWithRoutes(t, b, "r1", "r2")
	now := b.clock.Now()
	first, err := ns.Claim(b.ctx, now, time.Minute, 10)
	require.NoError(t, err)
	failed := map[string]store.Failure{}
	for _, n := range first {
		failed[n.EventID] = store.Failure{At: now, Error: "down", Next: now}
	}
	require.NoError(t, ns.Settle(b.ctx, first, failed))
	expireWithRoutes(t, b, "n1", "n2", "n3", "n4")

	claimed, err := ns.Claim(b.ctx, b.clock.Now(), time.Minute, 4)
	require.NoError(t, err)
	got := map[string]int{}
	for _, n := range claimed {
		got[n.JobID] = n.Attempts
	}
	require.Equal(t, map[string]int{"r1": 2, "r2": 2, "n1": 1, "n2": 1, "n3": 1, "n4": 1}, got)
}
