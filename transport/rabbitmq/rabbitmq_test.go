package rabbitmq_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/rabbitmq"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
	"github.com/llmq/llmq/transport/transporttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// conformanceDeliveryLimit is the delivery limit of the conformance
// queues (quorum only): above the deliveries any other test makes.
const conformanceDeliveryLimit = 5

func factory(queueType string) transporttest.Factory {
	return transporttest.Factory{
		NewDest: func(t *testing.T) string { return rabbitmqtest.NewQueue(t) },
		NewPublisher: func(t *testing.T) transport.Publisher {
			p, err := rabbitmq.NewPublisher(rabbitmq.Config{URL: rabbitmqtest.URL(), QueueType: queueType,
				DeliveryLimit: conformanceDeliveryLimit, ReconnectMin: 20 * time.Millisecond})
			require.NoError(t, err)
			return p
		},
		NewSubscriber: func(t *testing.T, dest, _ string, prefetch int) transport.Subscriber {
			s, err := rabbitmq.NewSubscriber(rabbitmq.Config{
				URL: rabbitmqtest.URL(), Queue: dest, QueueType: queueType, Prefetch: prefetch,
				DeliveryLimit: conformanceDeliveryLimit, ReconnectMin: 20 * time.Millisecond,
			})
			require.NoError(t, err)
			return s
		},
	}
}

func sever(t *testing.T, sub transport.Subscriber) {
	require.NoError(t, rabbitmq.SeverConnection(sub.(*rabbitmq.Subscriber)))
}

func TestConformanceQuorum(t *testing.T) {
	transporttest.Run(t, factory(rabbitmq.QueueQuorum), transporttest.Features{
		Priority: true, Redelivered: true, ExactRedelivery: true,
		Depth: true, BreakConnection: sever, DeliveryLimit: conformanceDeliveryLimit,
		ReplyProperties: true, Reply: true, ReplyUnroutable: true,
	})
}

func TestConformanceClassic(t *testing.T) {
	transporttest.Run(t, factory(rabbitmq.QueueClassic), transporttest.Features{
		Priority: true, PriorityOrder: true, Redelivered: true, ExactRedelivery: true,
		Depth: true, BreakConnection: sever,
		ReplyProperties: true, Reply: true, ReplyUnroutable: true,
	})
}
