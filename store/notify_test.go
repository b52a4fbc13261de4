package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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

func nextKey(t *testing.T, keys <-chan store.Key) store.Key {
	t.Helper()
	select {
	case k := <-keys:
		return k
	case <-time.After(10 * time.Second):
		t.Fatal("no notification after 10s")
		return store.Key{}
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
	require.Equal(t, key("ok"), nextKey(t, keys))

	require.NoError(t, b.store.Queue().MarkFailed(b.ctx, ls["bad"], 400, "invalid_request_error", "bad"))
	require.Equal(t, key("bad"), nextKey(t, keys))

	require.NoError(t, b.store.Queue().MarkExpired(b.ctx, ls["late"], "too late"))
	require.Equal(t, key("late"), nextKey(t, keys))

	d := newLetter("dead", "acme", "retries_exhausted")
	d.LeaseToken = ls["dead"].Token
	_, _, err = b.store.DeadLetters().RecordDeadLetter(b.ctx, d)
	require.NoError(t, err)
	require.Equal(t, key("dead"), nextKey(t, keys))

	_, err = b.store.Jobs().Cancel(b.ctx, "acme", "cancel")
	require.NoError(t, err)
	require.Equal(t, key("cancel"), nextKey(t, keys))

	require.NoError(t, b.store.DeadLetters().MarkDeadLettered(b.ctx, key("poison"), "unpublishable", "no"))
	require.Equal(t, key("poison"), nextKey(t, keys))

	// A refused move announces nothing: the next key is the sweep's.
	_, err = b.store.Jobs().Cancel(b.ctx, "acme", "ok")
	var ite *store.IllegalTransitionError
	require.True(t, errors.As(err, &ite))
	b.clock.Advance(366 * 24 * time.Hour) // past every deadline
	expired, err := b.store.Queue().ExpireOverdue(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []store.Key{key("overdue")}, expired)
	require.Equal(t, key("overdue"), nextKey(t, keys))
	select {
	case k := <-keys:
		t.Fatalf("unexpected notification %s", k)
	default:
	}
}

// TestJobQueuedNotifications: a statement that records queued jobs
// announces their models once it commits, one notification per model
// (Insert, Ingest, the outbox); a duplicate records nothing and announces
// nothing.
func TestJobQueuedNotifications(t *testing.T) {
	t.Parallel()
	b := setup(t)
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
	next := func() string {
		t.Helper()
		select {
		case m := <-models:
			return m
		case <-time.After(10 * time.Second):
			t.Fatal("no notification after 10s")
			return ""
		}
	}

	_, err := b.store.Jobs().Insert(b.ctx, newJob(t, "one"))
	require.NoError(t, err)
	require.Equal(t, "big", next())

	j1, j2, j3 := newJob(t, "two"), newJob(t, "three"), newJob(t, "four")
	j3.Body = []byte(`{"model":"small","messages":[{"role":"user","content":"hi"}]}`)
	_, err = b.store.Queue().Ingest(b.ctx, []store.NewJob{{Job: j1}, {Job: j2}, {Job: j3}})
	require.NoError(t, err)
	got := []string{next(), next()}
	require.ElementsMatch(t, []string{"big", "small"}, got)

	// A duplicate inserts no row: no notification; the next one is the
	// next statement's.
	_, err = b.store.Jobs().Insert(b.ctx, newJob(t, "one"))
	require.NoError(t, err)
	five := newJob(t, "five")
	five.Body = []byte(`{"model":"small","messages":[{"role":"user","content":"hi"}]}`)
	_, err = b.store.Jobs().Insert(b.ctx, five)
	require.NoError(t, err)
	require.Equal(t, "small", next())
	select {
	case m := <-models:
		t.Fatalf("unexpected notification %q", m)
	default:
	}
}
