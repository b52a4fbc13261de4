package rabbitmq_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/transport/rabbitmq"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
	"github.com/llmq/llmq/transport/transporttest"
)

func benchRabbit(b *testing.B, queueType string, consume bool) {
	q := rabbitmqtest.NewQueue(b)
	pub, err := rabbitmq.NewPublisher(rabbitmq.Config{URL: rabbitmqtest.URL(), QueueType: queueType})
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, pub.Close()) })
	if !consume {
		transporttest.BenchPublish(b, pub, q)
		return
	}
	sub, err := rabbitmq.NewSubscriber(rabbitmq.Config{URL: rabbitmqtest.URL(), Queue: q, QueueType: queueType, Prefetch: 500})
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, sub.Close()) })
	transporttest.BenchConsume(b, pub, q, sub)
}

func BenchmarkPublishQuorum(b *testing.B)  { benchRabbit(b, rabbitmq.QueueQuorum, false) }
func BenchmarkConsumeQuorum(b *testing.B)  { benchRabbit(b, rabbitmq.QueueQuorum, true) }
func BenchmarkPublishClassic(b *testing.B) { benchRabbit(b, rabbitmq.QueueClassic, false) }
func BenchmarkConsumeClassic(b *testing.B) { benchRabbit(b, rabbitmq.QueueClassic, true) }
