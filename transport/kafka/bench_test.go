package kafka_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/transport/kafka"
	"github.com/llmq/llmq/transport/kafka/kafkatest"
	"github.com/llmq/llmq/transport/transporttest"
)

func benchSetup(b *testing.B) (*kafka.Publisher, []string, string) {
	addrs := kafkatest.NewCluster(b)
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: addrs})
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, pub.Close()) })
	return pub, addrs, kafkatest.NewTopic(b, addrs, 10)
}

func BenchmarkPublish(b *testing.B) {
	pub, _, topic := benchSetup(b)
	transporttest.BenchPublish(b, pub, topic)
}

func BenchmarkConsume(b *testing.B) {
	pub, addrs, topic := benchSetup(b)
	cfg := kafka.Config{Brokers: addrs, Topic: topic, Group: "bench", Prefetch: 500}
	sub, err := kafka.NewSubscriber(cfg)
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, sub.Close()) })
	transporttest.BenchConsume(b, pub, topic, sub)
}
