package dlq

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/rabbitmq"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
)

// consumeOne returns the next message of queue, acked.
func consumeOne(t *testing.T, queue string) *transport.Message {
	t.Helper()
	sub, err := rabbitmq.NewSubscriber(rabbitmq.Config{URL: rabbitmqtest.URL(), Queue: queue, Prefetch: 10})
	require.NoError(t, err)
	return first(t, sub, queue)
}

// first returns the first message sub delivers, acked, then closes sub.
func first(t *testing.T, sub transport.Subscriber, dest string) *transport.Message {
	t.Helper()
	defer func() { require.NoError(t, sub.Close()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	msgs, err := sub.Consume(ctx)
	require.NoError(t, err)
	select {
	case m := <-msgs:
		require.NotNil(t, m, "subscriber closed")
		require.NoError(t, m.Ack(ctx))
		return m
	case <-ctx.Done():
		t.Fatalf("no message on %s", dest)
		return nil
	}
}

func TestWriterAndReplayOnRabbitMQ(t *testing.T) {
	if testing.Short() {
		t.Skip("RabbitMQ round trip")
	}
	t.Parallel()
	ctx := context.Background()
	queue := rabbitmqtest.NewQueue(t)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	st, err := store.Open(ctx, storetest.NewDB(t), store.WithClock(clock))
	require.NoError(t, err)
	t.Cleanup(st.Close)
	pub, err := rabbitmq.NewPublisher(rabbitmq.Config{URL: rabbitmqtest.URL()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })
	cfg := Config{Store: st.DeadLetters(), Publisher: pub, Destination: queue, Clock: clock}
	w, err := NewWriter(cfg)
	require.NoError(t, err)
	svc, err := NewService(cfg)
	require.NoError(t, err)

	b := &dlqBundle{ctx: ctx, clock: clock, store: st, leases: map[string]store.Lease{}}
	msg := b.claimedJob(t, "j1")
	l := b.letter("j1", msg)
	l.Key = nil // RabbitMQ has no key
	require.NoError(t, w.DeadLetter(ctx, l))
	require.NoError(t, w.DeadLetter(ctx, l))

	got := consumeOne(t, queue+DLQSuffix)
	recs, _, err := svc.List(ctx, store.DeadLetterListOptions{})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, msg, got.Value)
	require.Equal(t, map[string]string{
		"trace": "t1", HeaderReason: "retries_exhausted", HeaderAttempts: "8",
		HeaderLastError: "rate_limited: 429 Too Many Requests", HeaderSource: "jobs/3/42",
		HeaderDeadLetterID: strconv.FormatInt(recs[0].ID, 10),
	}, got.Headers)

	for range 2 {
		_, err := svc.Replay(ctx, "acme", recs[0].ID)
		require.NoError(t, err)
	}
	again := consumeOne(t, queue)
	require.Equal(t, msg, again.Value)
	require.Equal(t, strconv.FormatInt(recs[0].ID, 10), again.Headers[HeaderReplayOf])

	// Each queue got exactly one message.
	conn, err := amqp.Dial(rabbitmqtest.URL())
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	for _, q := range []string{queue, queue + DLQSuffix} {
		info, err := ch.QueueDeclarePassive(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
		require.NoError(t, err, q)
		require.Equal(t, 0, info.Messages, q)
	}
}
