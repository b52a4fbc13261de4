package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// listen runs ListenJobsDone until the test ends and returns the keys it
// hears, once it listens.
func (b *testBundle) listen(t *testing.T) <-chan store.Key {
	t.Helper()
	ctx, cancel := context.WithCancel(b.ctx)
	keys := make(chan store.Key, 64)
	listening := make(chan struct{})
	ended := make(chan error, 1)
	go func() {
		ended <- b.store.Jobs().ListenJobsDone(ctx, func() { close(listening) }, func(k store.Key) { keys <- k })
	}()
	t.Cleanup(func() {
		cancel()
		require.ErrorIs(t, <-ended, context.Canceled)
	})
	select {
	case <-listening:
	case err := <-ended:
		t.Fatalf("listen: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not listening after 10s")
	}
	return keys
}

// received is the next value of ch, once it comes (10 s at most).
func received[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("no notification after 10s")
		var zero T
		return zero
	}
}

// TestJobDoneNotifications: every store operation that ends a job
// announces its key on JobDoneChannel once it commits, and nothing else
// does (a claim, a retry, a refused move).
func TestJobDoneNotifications(t *testing.T) {
	t.Parallel()
	b := setup(t)
	keys := b.listen(t)
	ls := b.hold(t, "w1", newJob(t, "ok"), newJob(t, "bad"), newJob(t, "late"), newJob(t, "dead"))
	require.NoError(t, b.store.Queue().MarkRetrying(b.ctx, ls["bad"], store.PolicyState{Retries: 1}, "http_502", "bad gateway"))
	for _, id := range []string{"cancel", "poison", "overdue"} {
		_, err := b.store.Jobs().Insert(b.ctx, newJob(t, id))
		require.NoError(t, err)
	}
	key := func(id string) store.Key { return store.Key{Tenant: "acme", ID: id} }

	stored, err := b.store.Queue().StoreResult(b.ctx, key("ok"), store.Result{Response: []byte(`{"id":"c1"}`), UsedModel: "big"})
	require.NoError(t, err)
	require.True(t, stored)
	require.Equal(t, key("ok"), received(t, keys))

	require.NoError(t, b.store.Queue().MarkFailed(b.ctx, ls["bad"], 400, "invalid_request_error", "bad"))
	require.Equal(t, key("bad"), received(t, keys))

	require.NoError(t, b.store.Queue().MarkExpired(b.ctx, ls["late"], "too late"))
	require.Equal(t, key("late"), received(t, keys))

	d := newLetter("dead", "acme", "retries_exhausted")
	d.LeaseToken = ls["dead"].Token
	_, _, err = b.store.DeadLetters().RecordDeadLetter(b.ctx, d)
	require.NoError(t, err)
	require.Equal(t, key("dead"), received(t, keys))

	_, err = b.store.Jobs().Cancel(b.ctx, "acme", "cancel")
	require.NoError(t, err)
	require.Equal(t, key("cancel"), received(t, keys))

	require.NoError(t, b.store.DeadLetters().MarkDeadLettered(b.ctx, key("poison"), "unpublishable", "no"))
	require.Equal(t, key("poison"), received(t, keys))

	// A refused move announces nothing: the next key is the sweep's.
	_, err = b.store.Jobs().Cancel(b.ctx, "acme", "ok")
	var ite *store.IllegalTransitionError
	require.True(t, errors.As(err, &ite))
	b.clock.Advance(366 * 24 * time.Hour) // past every deadline
	expired, err := b.store.Queue().ExpireOverdue(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []store.Key{key("overdue")}, expired)
	require.Equal(t, key("overdue"), received(t, keys))
	select {
	case k := <-keys:
		t.Fatalf("unexpected notification %s", k)
	default:
	}
}

// listenQueued runs ListenJobsQueued until the test ends and returns the
// models it hears, once it listens.
func (b *testBundle) listenQueued(t *testing.T) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(b.ctx)
	models := make(chan string, 64)
	listening := make(chan struct{})
	ended := make(chan error, 1)
	go func() {
		ended <- b.store.Queue().ListenJobsQueued(ctx, func() { close(listening) }, func(m string) { models <- m })
	}()
	t.Cleanup(func() {
		cancel()
		require.ErrorIs(t, <-ended, context.Canceled)
	})
	select {
	case <-listening:
	case err := <-ended:
		t.Fatalf("listen: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not listening after 10s")
	}
	return models
}

// jobOf is a job of model.
func jobOf(t *testing.T, id, model string) *llmq.Job {
	t.Helper()
	j := newJob(t, id)
	j.Body = []byte(`{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`)
	return j
}

// TestJobQueuedNotifications: a store operation that records queued jobs
// announces their models once it commits, one notification per model
// (Insert, Ingest, the outbox); a duplicate records nothing and announces
// nothing.
func TestJobQueuedNotifications(t *testing.T) {
	t.Parallel()
	b := setup(t)
	models := b.listenQueued(t)
	next := func() string { t.Helper(); return received(t, models) }

	_, err := b.store.Jobs().Insert(b.ctx, newJob(t, "one"))
	require.NoError(t, err)
	require.Equal(t, "big", next())

	j1, j2, j3 := newJob(t, "two"), newJob(t, "three"), jobOf(t, "four", "small")
	_, err = b.store.Queue().Ingest(b.ctx, []store.NewJob{{Job: j1}, {Job: j2}, {Job: j3}})
	require.NoError(t, err)
	got := []string{next(), next()}
	require.ElementsMatch(t, []string{"big", "small"}, got)

	// A duplicate inserts no row: no notification; the next one is the
	// next statement's.
	_, err = b.store.Jobs().Insert(b.ctx, newJob(t, "one"))
	require.NoError(t, err)
	_, err = b.store.Jobs().Insert(b.ctx, jobOf(t, "five", "small"))
	require.NoError(t, err)
	require.Equal(t, "small", next())
	select {
	case m := <-models:
		t.Fatalf("unexpected notification %q", m)
	default:
	}
}

// TestJobQueuedAnnouncedAfterCommit: a model is announced once the
// transaction that recorded its jobs committed, not before: a job the
// outbox holds in its open transaction while it publishes is announced
// after a job recorded meanwhile, and is there to claim when heard.
func TestJobQueuedAnnouncedAfterCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	models := b.listenQueued(t)
	publishing, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // a failed test leaves no transaction open
	recorded := make(chan error, 1)
	go func() {
		_, err := b.store.Outbox().InsertOutboxPublishing(b.ctx, []store.NewJob{{Job: jobOf(t, "held", "held-model")}},
			func([]store.Recorded) error {
				close(publishing)
				<-release
				return nil
			})
		recorded <- err
	}()
	<-publishing
	_, err := b.store.Jobs().Insert(b.ctx, jobOf(t, "marker", "marker-model"))
	require.NoError(t, err)
	require.Equal(t, "marker-model", received(t, models), "the open transaction's model is not announced")
	free()
	require.NoError(t, <-recorded)
	require.Equal(t, "held-model", received(t, models))
	n, err := b.store.Queue().CountQueued(b.ctx, []string{"acme"}, []int64{10})
	require.NoError(t, err)
	require.Equal(t, []int64{2}, n, "both jobs are queued when the second is heard")
}

// TestJobQueuedAnnouncementsTaken: recordings at once are announced
// together, and none is left out: every model of 16 concurrent inserts is
// heard, once.
func TestJobQueuedAnnouncementsTaken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	models := b.listenQueued(t)
	const n = 16
	want := make([]string, n)
	errs := make(chan error, n)
	for i := range n {
		want[i] = fmt.Sprintf("model-%02d", i)
		go func() {
			_, err := b.store.Jobs().Insert(b.ctx, jobOf(t, fmt.Sprintf("j%d", i), want[i]))
			errs <- err
		}()
	}
	for range n {
		require.NoError(t, <-errs)
	}
	got := make([]string, n)
	for i := range got {
		got[i] = received(t, models)
	}
	require.ElementsMatch(t, want, got)
	select {
	case m := <-models:
		t.Fatalf("announced twice: %q", m)
	default:
	}
}
