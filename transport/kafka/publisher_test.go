package kafka_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/kafka"
	"github.com/llmq/llmq/transport/kafka/kafkatest"
)

func publishCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Messages that each fit but together pass the broker's message.max.bytes
// (1 MB on kfake, as on Kafka) go out in several batches, not one the
// broker refuses.
func TestBatchesFitTheBroker(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	var msgs []transport.Message
	for i := range 5 {
		msgs = append(msgs, transport.Message{Key: []byte{byte(i)}, Value: bytes.Repeat([]byte{'a' + byte(i)}, 400<<10)})
	}
	require.NoError(t, b.pub.Publish(publishCtx(t), b.topic, msgs...))
	// kafka-go gives a fetch's answer MaxWait to arrive: 2 MB from kfake,
	// under the race detector beside other packages' tests, took longer
	// than the tests' 100 ms at every try once, and nothing came.
	_, ch := b.subscribe(t, "g", 10, func(c *kafka.Config) { c.MaxWait = 2 * time.Second })
	for i := range 5 {
		m := recv(t, ch)
		require.Equal(t, msgs[i].Value, m.Value)
		require.NoError(t, m.Ack(context.Background()))
	}
}

// MaxValueBytes is exact enough: a message of that size is taken by the
// broker, one byte more is refused as ErrMessageRejected before anything
// is sent.
func TestMaxValueBytes(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	m := transport.Message{Key: []byte("0190b0f6-6c3e-7b44-9c1e-123456789abc"), Headers: map[string]string{"x-llmq-reason": "none"}}
	limit := b.pub.MaxValueBytes(m)
	require.Greater(t, limit, kafka.MaxMessageBytesDefault-200)
	m.Value = bytes.Repeat([]byte{'x'}, limit)
	require.NoError(t, b.pub.Publish(publishCtx(t), b.topic, m))
	m.Value = append(m.Value, 'y')
	err := b.pub.Publish(publishCtx(t), b.topic, m)
	require.ErrorIs(t, err, transport.ErrMessageRejected)
}

// A broker whose limit is lower than the publisher believes refuses the
// message itself: that refusal is ErrMessageRejected too, and the publisher
// keeps working for messages that fit.
func TestBrokerRefusalIsRejected(t *testing.T) {
	t.Parallel()
	addrs := kafkatest.NewCluster(t)
	topic := kafkatest.NewTopic(t, addrs, 1)
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: addrs, MaxMessageBytes: 4 << 20})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })
	big := transport.Message{Value: bytes.Repeat([]byte{'x'}, 2<<20)}
	err = pub.Publish(publishCtx(t), topic, big)
	require.ErrorIs(t, err, transport.ErrMessageRejected)
	require.NoError(t, pub.Publish(publishCtx(t), topic, transport.Message{Value: []byte("small")}))
}
