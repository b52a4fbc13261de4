package open_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/kafka"
	"github.com/llmq/llmq/transport/kafka/kafkatest"
	"github.com/llmq/llmq/transport/memory"
	"github.com/llmq/llmq/transport/open"
	"github.com/llmq/llmq/transport/rabbitmq"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParse(t *testing.T) {
	tests := []struct {
		url  string
		want open.Target
	}{
		{"kafka://127.0.0.1:9092/llmq.jobs", open.Target{Kind: open.KindKafka, Dest: "llmq.jobs", Brokers: []string{"127.0.0.1:9092"}}},
		{"kafka://a:1,b:2/jobs?group=g1&prefetch=10", open.Target{Kind: open.KindKafka, Dest: "jobs", Brokers: []string{"a:1", "b:2"}, Group: "g1", Prefetch: 10}},
		{"kafka://a:1", open.Target{Kind: open.KindKafka, Dest: open.DestDefault, Brokers: []string{"a:1"}}},
		{"amqp://guest:guest@127.0.0.1:5672/?queue=llmq.jobs", open.Target{Kind: open.KindRabbitMQ, Dest: "llmq.jobs", AMQPURL: "amqp://guest:guest@127.0.0.1:5672/"}},
		{"amqp://u:p@h:5672/vh?queue=q&queue_type=classic&max_priority=5&heartbeat=5", open.Target{
			Kind: open.KindRabbitMQ, Dest: "q", QueueType: "classic", MaxPriority: 5, AMQPURL: "amqp://u:p@h:5672/vh?heartbeat=5",
		}},
		{"memory://demo", open.Target{Kind: open.KindMemory, Dest: open.DestDefault, Memory: "demo"}},
		{"memory://demo/q2", open.Target{Kind: open.KindMemory, Dest: "q2", Memory: "demo"}},
	}
	for _, tc := range tests {
		t.Run(tc.url, func(t *testing.T) {
			got, err := open.Parse(tc.url)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	for _, bad := range []string{"redis://x", "kafka:///topic", "kafka://a:1/t?prefetch=0", "amqp://h/?max_priority=x", "::"} {
		_, err := open.Parse(bad)
		require.ErrorIs(t, err, open.ErrBadURL, bad)
	}
}

func TestOpenKinds(t *testing.T) {
	ctx := context.Background()
	for url, check := range map[string]func(transport.Publisher, transport.Subscriber){
		"kafka://127.0.0.1:1/t": func(p transport.Publisher, s transport.Subscriber) {
			require.IsType(t, &kafka.Publisher{}, p)
			require.IsType(t, &kafka.Subscriber{}, s)
		},
		"amqp://guest:guest@127.0.0.1:5672/?queue=q": func(p transport.Publisher, s transport.Subscriber) {
			require.IsType(t, &rabbitmq.Publisher{}, p)
			require.IsType(t, &rabbitmq.Subscriber{}, s)
		},
		"memory://kinds": func(p transport.Publisher, s transport.Subscriber) {
			require.IsType(t, &memory.Publisher{}, p)
			require.IsType(t, &memory.Subscriber{}, s)
		},
	} {
		pub, sub, err := open.Open(ctx, url, open.Options{})
		require.NoError(t, err, url)
		check(pub, sub)
		require.NoError(t, sub.Close())
		require.NoError(t, pub.Close())
	}
}

// A message published through one Open reaches a subscriber of another.
func TestOpenRoundTrip(t *testing.T) {
	addrs := kafkatest.NewCluster(t, "jobs")
	for _, url := range []string{
		"memory://roundtrip/jobs",
		"kafka://" + addrs[0] + "," + addrs[1] + "/jobs?group=open-test",
		"amqp://guest:guest@127.0.0.1:5672/?queue=llmq-open-test-" + time.Now().Format("150405.000000"),
	} {
		t.Run(url, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			target, err := open.Parse(url)
			require.NoError(t, err)
			pub, _, err := open.Open(ctx, url, open.Options{})
			require.NoError(t, err)
			defer pub.Close()
			_, sub, err := open.Open(ctx, url, open.Options{Prefetch: 1})
			require.NoError(t, err)
			defer sub.Close()
			if target.Kind == open.KindRabbitMQ {
				defer rabbitmqtest.Delete(t, target.Dest, target.Dest+rabbitmq.RejectedSuffix)
			}
			require.NoError(t, pub.Publish(ctx, target.Dest, transport.Message{Value: []byte("hello")}))
			ch, err := sub.Consume(ctx)
			require.NoError(t, err)
			select {
			case m := <-ch:
				require.Equal(t, "hello", string(m.Value))
				require.NoError(t, m.Ack(ctx))
			case <-ctx.Done():
				require.FailNow(t, "no delivery")
			}
		})
	}
}
