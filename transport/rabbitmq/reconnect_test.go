package rabbitmq_test

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"sync"
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

// logBuffer collects log output written from several goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A queue declared beforehand with other arguments (here a plain quorum
// queue, as llmq declared them before it set a delivery limit) is used as
// it is, with a warning that names the arguments it may lack.
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
	_, err = ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	require.NoError(t, err)
	var logs logBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	pub := newPublisher(t, rabbitmq.Config{QueueType: rabbitmq.QueueQuorum, Logger: log})
	require.NoError(t, pub.Publish(ctx, q, transport.Message{Value: []byte("x")}))
	sub := newSubscriber(t, rabbitmq.Config{Queue: q, QueueType: rabbitmq.QueueQuorum, Logger: log})
	out, err := sub.Consume(ctx)
	require.NoError(t, err)
	select {
	case m := <-out:
		require.Equal(t, "x", string(m.Value))
		require.NoError(t, m.Ack(ctx))
	case <-ctx.Done():
		require.FailNow(t, "no delivery")
	}
	warning := logs.String()
	require.Contains(t, warning, "level=WARN")
	require.Contains(t, warning, "queue="+q+" ")
	for _, arg := range []string{`x-delivery-limit=\"20\"`, `x-dead-letter-exchange=\"\"`,
		`x-dead-letter-routing-key=\"` + q + `.rejected\"`} {
		require.Contains(t, warning, arg)
	}
	require.Contains(t, warning, "Upgrading an existing RabbitMQ queue")
}

// A message that keeps being nacked on a queue with a delivery limit of 2
// is delivered three times, then comes back through "<queue>.rejected"
// marked rejected (RabbitMQ 3.10 without a dead-letter target would drop
// it, and 4.x drops it after 20 by default); acked there, it is gone.
func TestDeliveryLimitRejects(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q := rabbitmqtest.NewQueue(t)
	pub := newPublisher(t, rabbitmq.Config{DeliveryLimit: 2})
	require.NoError(t, pub.Publish(ctx, q, transport.Message{Value: []byte("poison"), Headers: map[string]string{"x-llmq-tenant": "acme"}}))
	sub := newSubscriber(t, rabbitmq.Config{Queue: q, DeliveryLimit: 2})
	out, err := sub.Consume(ctx)
	require.NoError(t, err)
	next := func() *transport.Message {
		select {
		case m := <-out:
			return m
		case <-ctx.Done():
			require.FailNow(t, "no delivery: the message was dropped")
			return nil
		}
	}
	for n := range 3 {
		m := next()
		require.Empty(t, m.Rejected, "delivery %d", n+1)
		require.Equal(t, q+"/", m.Source[:len(q)+1])
		require.NoError(t, m.Nack(ctx))
	}
	m := next()
	require.Equal(t, "poison", string(m.Value))
	require.Equal(t, transport.RejectedDeliveryLimit, m.Rejected)
	require.Equal(t, 1, m.RejectedCount)
	require.Equal(t, map[string]string{"x-llmq-tenant": "acme"}, m.Headers, "the original headers, without x-death")
	require.Equal(t, q+".rejected/", m.Source[:len(q)+10])
	require.NoError(t, m.Ack(ctx))
	depth, err := sub.Depth(ctx)
	require.NoError(t, err)
	require.Zero(t, depth)
	select {
	case m := <-out:
		require.FailNow(t, "delivered again", "%q rejected=%q", m.Value, m.Rejected)
	case <-time.After(200 * time.Millisecond):
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
