package rabbitmq_test

import (
	"cmp"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/llmq/llmq/internal/transport"
	"github.com/llmq/llmq/internal/transport/rabbitmq"
	"github.com/llmq/llmq/internal/transport/transporttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func amqpURL() string {
	return cmp.Or(os.Getenv("LLMQ_TEST_AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/")
}

var queueSeq atomic.Int64

// newQueue returns a queue name unique to the run and deletes the queue and
// its ".dlq" in t.Cleanup.
func newQueue(t *testing.T) string { return newQueueB(t) }

func newQueueB(t testing.TB) string {
	name := fmt.Sprintf("llmq-test-%d-%d", time.Now().UnixNano()%1e9, queueSeq.Add(1))
	t.Cleanup(func() {
		conn, err := amqp.Dial(amqpURL())
		require.NoError(t, err)
		defer conn.Close()
		ch, err := conn.Channel()
		require.NoError(t, err)
		defer ch.Close()
		for _, q := range []string{name, name + ".dlq"} {
			_, err := ch.QueueDelete(q, false, false, false)
			require.NoError(t, err)
		}
	})
	return name
}

func factory(queueType string) transporttest.Factory {
	return transporttest.Factory{
		NewDest: newQueue,
		NewPublisher: func(t *testing.T) transport.Publisher {
			p, err := rabbitmq.NewPublisher(rabbitmq.Config{URL: amqpURL(), QueueType: queueType, ReconnectMin: 20 * time.Millisecond})
			require.NoError(t, err)
			return p
		},
		NewSubscriber: func(t *testing.T, dest, _ string, prefetch int) transport.Subscriber {
			s, err := rabbitmq.NewSubscriber(rabbitmq.Config{
				URL: amqpURL(), Queue: dest, QueueType: queueType, Prefetch: prefetch,
				ReconnectMin: 20 * time.Millisecond,
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
		Priority: true, Redelivered: true, ExactRedelivery: true, NackRequeues: true,
		Depth: true, BreakConnection: sever,
	})
}

func TestConformanceClassic(t *testing.T) {
	transporttest.Run(t, factory(rabbitmq.QueueClassic), transporttest.Features{
		Priority: true, PriorityOrder: true, Redelivered: true, ExactRedelivery: true,
		NackRequeues: true, Depth: true, BreakConnection: sever,
	})
}
