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
	var txns, unpublished int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(DISTINCT xmin::text), count(*) FILTER (WHERE published_at IS NULL)
		FROM jobs WHERE id LIKE 'grouped-%'`).Scan(&txns, &unpublished))
	require.Equal(t, 1, txns, "the queued jobs were recorded, marked published, by one transaction")
	require.Zero(t, unpublished)
}
