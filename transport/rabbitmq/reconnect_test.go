package rabbitmq_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/rabbitmq"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
)

func newPublisher(t *testing.T, cfg rabbitmq.Config) *rabbitmq.Publisher {
	cfg.URL = rabbitmqtest.URL()
	cfg.ReconnectMin = 20 * time.Millisecond
	p, err := rabbitmq.NewPublisher(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

func newSubscriber(t *testing.T, cfg rabbitmq.Config) *rabbitmq.Subscriber {
	cfg.URL = rabbitmqtest.URL()
	cfg.ReconnectMin = 20 * time.Millisecond
	s, err := rabbitmq.NewSubscriber(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// A publisher whose connection dropped redials and publishes the rest; every
// message is confirmed and in the queue (at least once).
func TestPublisherReconnects(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q := rabbitmqtest.NewQueue(t)
	pub := newPublisher(t, rabbitmq.Config{})
	require.NoError(t, pub.Publish(ctx, q, transport.Message{Value: []byte("first")}))
	require.NoError(t, rabbitmq.SeverPublisher(pub))
	var msgs []transport.Message
	for i := range 100 {
		msgs = append(msgs, transport.Message{Value: []byte(strconv.Itoa(i))})
	}
	require.NoError(t, pub.Publish(ctx, q, msgs...))

	sub := newSubscriber(t, rabbitmq.Config{Queue: q})
	depth, err := sub.Depth(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(101), depth)
}

// A queue declared beforehand with other arguments is used as it is.
func TestExistingQueueWithOtherArguments(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q := rabbitmqtest.NewQueue(t)
	conn, err := amqp.Dial(rabbitmqtest.URL())
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "classic"})
	require.NoError(t, err)

	pub := newPublisher(t, rabbitmq.Config{QueueType: rabbitmq.QueueQuorum})
	require.NoError(t, pub.Publish(ctx, q, transport.Message{Value: []byte("x"), Priority: 3}))
	sub := newSubscriber(t, rabbitmq.Config{Queue: q, QueueType: rabbitmq.QueueQuorum})
	out, err := sub.Consume(ctx)
	require.NoError(t, err)
	select {
	case m := <-out:
		require.Equal(t, "x", string(m.Value))
		require.Equal(t, uint8(3), m.Priority)
		require.NoError(t, m.Ack(ctx))
	case <-ctx.Done():
		require.FailNow(t, "no delivery")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg   rabbitmq.Config
		field string
	}{
		{rabbitmq.Config{}, "URL"},
		{rabbitmq.Config{URL: "amqp://x", QueueType: "stream"}, "QueueType"},
		{rabbitmq.Config{URL: "amqp://x", Prefetch: 70000}, "Prefetch"},
		{rabbitmq.Config{URL: "amqp://x", MaxPriority: 300}, "MaxPriority"},
		{rabbitmq.Config{URL: "amqp://x", ReconnectMin: time.Minute}, "ReconnectMin"},
	} {
		_, err := rabbitmq.NewPublisher(tc.cfg)
		require.ErrorContains(t, err, tc.field)
	}
	_, err := rabbitmq.NewSubscriber(rabbitmq.Config{URL: "amqp://x"})
	require.ErrorContains(t, err, "Queue")
}
