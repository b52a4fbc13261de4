package kafka_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/kafka"
	"github.com/llmq/llmq/transport/kafka/kafkatest"
	"github.com/llmq/llmq/transport/transporttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	addrs := kafkatest.NewCluster(t)
	transporttest.Run(t, transporttest.Factory{
		NewDest: func(t *testing.T) string { return kafkatest.NewTopic(t, addrs, 4) },
		NewPublisher: func(t *testing.T) transport.Publisher {
			p, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: addrs, TopicPartitions: 2})
			require.NoError(t, err)
			return p
		},
		NewSubscriber: func(t *testing.T, dest, group string, prefetch int) transport.Subscriber {
			cfg := kafkatest.Config(addrs, dest, group)
			cfg.Prefetch = prefetch
			s, err := kafka.NewSubscriber(cfg)
			require.NoError(t, err)
			return s
		},
	}, transporttest.Features{Key: true, Depth: true, Reply: true})
}
