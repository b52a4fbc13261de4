package rabbitmq_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/rabbitmq"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
)

// TestDirectReply: a reply to a client on RabbitMQ's direct reply-to
// (consuming amq.rabbitmq.reply-to, its requests' reply_to named by the
// broker) reaches it and is reported delivered; once the client's channel
// is closed, a reply fails as unroutable.
func TestDirectReply(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := amqp.Dial(rabbitmqtest.URL())
	require.NoError(t, err)
	defer conn.Close()
	client, err := conn.Channel()
	require.NoError(t, err)
	replies, err := client.Consume("amq.rabbitmq.reply-to", "", true, false, false, false, nil)
	require.NoError(t, err)
	// The broker names the reply_to of a request published on the
	// consuming channel: read it back from a queue.
	q := rabbitmqtest.NewQueue(t)
	_, err = client.QueueDeclare(q, false, true, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, client.PublishWithContext(ctx, "", q, false, false, amqp.Publishing{ReplyTo: "amq.rabbitmq.reply-to", Body: []byte("job")}))
	reader, err := conn.Channel()
	require.NoError(t, err)
	req, ok, err := reader.Get(q, true)
	require.NoError(t, err)
	require.True(t, ok)
	require.Contains(t, req.ReplyTo, "amq.rabbitmq.reply-to.")

	p, err := rabbitmq.NewPublisher(rabbitmq.Config{URL: rabbitmqtest.URL()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	require.NoError(t, p.Reply(ctx, req.ReplyTo, transport.Message{ID: "r1", Value: []byte("result"), CorrelationID: "c1"}))
	select {
	case m := <-replies:
		require.Equal(t, "result", string(m.Body))
		require.Equal(t, "c1", m.CorrelationId)
	case <-ctx.Done():
		t.Fatal("no reply")
	}

	require.NoError(t, client.Close())
	require.ErrorIs(t, p.Reply(ctx, req.ReplyTo, transport.Message{ID: "r2", Value: []byte("late")}), transport.ErrUnroutable)
	require.NoError(t, p.Reply(ctx, q, transport.Message{ID: "r3", Value: []byte("x")}), "the publisher goes on")
}
