package producer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
)

// heldPublisher holds every Publish until release is closed, counting the
// calls and the messages.
type heldPublisher struct {
	transport.Publisher
	release chan struct{}
	mu      sync.Mutex
	calls   int
	msgs    int
}

func (h *heldPublisher) Publish(ctx context.Context, dest string, msgs ...transport.Message) error {
	h.mu.Lock()
	h.calls++
	h.msgs += len(msgs)
	h.mu.Unlock()
	<-h.release
	return h.Publisher.Publish(ctx, dest, msgs...)
}

// TestConcurrentPublishesShareAFlush: single-job publishes that queue
// while every flush is busy are recorded by one transaction and published
// by one call; each caller gets its own receipt, and of two callers with
// one id exactly one created the job.
func TestConcurrentPublishesShareAFlush(t *testing.T) {
	t.Parallel()
	b := setup(t)
	held := &heldPublisher{Publisher: b.broker.NewPublisher(), release: make(chan struct{})}
	p := b.producer(t, func(c *producer.Config) { c.Publisher = held })
	ctx := context.Background()
	var wg sync.WaitGroup
	// The first callers take every flush slot and wait in their publish.
	for i := range producer.GroupFlushes {
		wg.Go(func() {
			_, _, err := p.Publish(ctx, newJob(fmt.Sprintf("busy-%d", i)))
			assert.NoError(t, err)
		})
	}
	require.Eventually(t, func() bool {
		held.mu.Lock()
		defer held.mu.Unlock()
		return held.calls == producer.GroupFlushes
	}, 10*time.Second, time.Millisecond)
	// The next ones queue, grouped-00 twice.
	const n = 20
	receipts := make([]producer.Receipt, n+1)
	for i := range n + 1 {
		id := fmt.Sprintf("grouped-%02d", i)
		if i == n {
			id = "grouped-00"
		}
		wg.Go(func() {
			var err error
			receipts[i], _, err = p.Publish(ctx, newJob(id))
			assert.NoError(t, err)
		})
	}
	require.Eventually(t, func() bool { return producer.QueuedRecords(p) == n+1 }, 10*time.Second, time.Millisecond)
	close(held.release)
	wg.Wait()

	require.Equal(t, producer.GroupFlushes+1, held.calls, "the queued publishes went out in one call")
	require.Equal(t, producer.GroupFlushes+n, held.msgs, "the repeated id is published once")
	require.NotEqual(t, receipts[0].Created, receipts[n].Created, "one of the two callers of grouped-00 created it")
	for i := 1; i < n; i++ {
		require.Equal(t, producer.Receipt{ID: fmt.Sprintf("grouped-%02d", i), Tenant: "acme", Status: llmq.StatusQueued,
			Created: true, Published: true}, receipts[i])
	}
	require.NoError(t, p.Drain(ctx))
	var txns, unpublished int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(DISTINCT xmin::text), count(*) FILTER (WHERE published_at IS NULL)
		FROM jobs WHERE id LIKE 'grouped-%'`).Scan(&txns, &unpublished))
	require.Equal(t, 1, txns, "the queued jobs were recorded, then marked published, by one transaction each")
	require.Zero(t, unpublished)
}

// heldMarks is a store whose MarkPublished waits for release, recording
// the keys of each call.
type heldMarks struct {
	producer.Store
	release chan struct{}
	mu      sync.Mutex
	calls   [][]string
}

func (h *heldMarks) MarkPublished(ctx context.Context, keys []store.Key) error {
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = k.ID
	}
	h.mu.Lock()
	h.calls = append(h.calls, ids)
	h.mu.Unlock()
	<-h.release
	return h.Store.MarkPublished(ctx, keys)
}

func (h *heldMarks) callCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.calls)
}

// TestAnswerDoesNotWaitForTheMark: a publish is answered once the broker
// confirmed, while its mark is still being written; the marks of the
// publishes confirmed meanwhile are written together, by one statement,
// and Drain waits for them.
func TestAnswerDoesNotWaitForTheMark(t *testing.T) {
	t.Parallel()
	b := setup(t)
	held := &heldMarks{Store: b.store, release: make(chan struct{})}
	p := b.producer(t, func(c *producer.Config) { c.Store = held })
	ctx := context.Background()
	publish := func(id string) {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			r, _, err := p.Publish(ctx, newJob(id))
			if err == nil && !r.Published {
				err = fmt.Errorf("%s not published", id)
			}
			done <- err
		}()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("publish of %s waited for its mark", id)
		}
	}
	publish("first")
	require.Eventually(t, func() bool { return held.callCount() == 1 }, 10*time.Second, time.Millisecond)
	publish("second")
	publish("third")
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, p.Drain(short), context.DeadlineExceeded, "the marks are held")
	require.Nil(t, publishedAt(t, b.pool, "second"))

	close(held.release)
	require.NoError(t, p.Drain(ctx))
	require.Equal(t, [][]string{{"first"}, {"second", "third"}}, held.calls, "the marks that waited went together")
	for _, id := range []string{"first", "second", "third"} {
		require.NotNil(t, publishedAt(t, b.pool, id), id)
	}
}
