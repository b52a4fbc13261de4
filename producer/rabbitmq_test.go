package producer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport/open"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
)

// TestBackpressureRabbitMQJobsInFlight: over a real RabbitMQ queue, the
// messages a consumer holds unacked leave RabbitMQ's ready count, which is
// all the producer's probe (a separate connection, as in `llmq api`) can
// read; the depth still counts every job exactly once, from Postgres:
// delivered and unacked, ingested and acked, running, then finished.
func TestBackpressureRabbitMQJobsInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	url := rabbitmqtest.BrokerURL(rabbitmqtest.NewQueue(t))
	target, err := open.Parse(url)
	require.NoError(t, err)
	pub, probe, err := open.Open(ctx, url, open.Options{Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close(); _ = probe.Close() })
	_, consumer, err := open.Open(ctx, url, open.Options{Prefetch: 4, Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { _ = consumer.Close() })
	p := b.producer(t, func(c *producer.Config) {
		c.Publisher, c.Destination, c.DepthProbe = pub, target.Dest, probe
		c.SoftDepth, c.HardDepth = 5, 100
	})
	for i := range 10 {
		_, _, err := p.Publish(ctx, newJob(fmt.Sprintf("j%d", i)))
		require.NoError(t, err)
	}
	queue := func() [4]int64 {
		t.Helper()
		q, err := p.Queue(ctx)
		require.NoError(t, err)
		return [4]int64{q.Depth, q.Lag, q.Queued, q.InFlight}
	}
	require.Eventually(t, func() bool { return queue()[1] == 10 }, 5*time.Second, 10*time.Millisecond, "RabbitMQ counts the 10 messages")
	require.Equal(t, [4]int64{10, 10, 10, 0}, queue(), "published: each job once")

	// A worker's subscriber takes its prefetch of 4 and holds them
	// unacked: RabbitMQ's ready count drops to 6.
	msgs, err := consumer.Consume(ctx)
	require.NoError(t, err)
	for range 4 {
		m := receive(t, msgs)
		defer func() { _ = m.Ack(ctx) }()
	}
	require.Eventually(t, func() bool { return queue()[1] == 6 }, 5*time.Second, 10*time.Millisecond, "4 unacked leave the ready count")
	require.Equal(t, [4]int64{10, 6, 10, 0}, queue(), "the 4 in flight at the consumer are still counted")
	q, err := p.Queue(ctx)
	require.NoError(t, err)
	require.Equal(t, producer.StateThrottled, q.State, "10 jobs over a soft depth of 5, not the 6 RabbitMQ sees")

	// The worker's claim runs them; then they finish.
	recs, err := b.store.Queue().Claim(ctx, store.ClaimRequest{Model: "gpt-4o-mini", Owner: "w", Lease: time.Minute, Limit: 4})
	require.NoError(t, err)
	require.Len(t, recs, 4)
	require.Equal(t, [4]int64{10, 6, 6, 4}, queue(), "running: in flight")
	for _, rec := range recs {
		_, err := b.store.Queue().StoreResult(ctx, rec.Key(), store.Result{Response: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	require.Equal(t, [4]int64{6, 6, 6, 0}, queue(), "finished: gone from the backlog")
}
