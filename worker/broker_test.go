package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/kafka/kafkatest"
	"github.com/llmq/llmq/transport/open"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
	"github.com/llmq/llmq/worker"
)

// realBrokers open a queue or topic of their own on each real broker (kfake
// speaks the Kafka protocol in-process) and return its URL.
var realBrokers = map[string]func(t *testing.T) string{
	"rabbitmq": func(t *testing.T) string { return rabbitmqtest.BrokerURL(rabbitmqtest.NewQueue(t)) },
	"kafka":    func(t *testing.T) string { return kafkaURL(t, 4) },
}

// kafkaURL is the URL of a new topic of partitions on a kfake cluster of
// the test's own.
func kafkaURL(t *testing.T, partitions int) string {
	addrs := kafkatest.NewCluster(t)
	return "kafka://" + strings.Join(addrs, ",") + "/" + kafkatest.NewTopic(t, addrs, partitions)
}

// openBroker opens url for a test: its destination, a publisher closed when
// the test ends and a subscriber.
func openBroker(t *testing.T, url string, prefetch int) (dest string, pub transport.Publisher, sub transport.Subscriber) {
	t.Helper()
	target, err := open.Parse(url)
	require.NoError(t, err)
	pub, sub, err = open.Open(context.Background(), url, open.Options{Prefetch: prefetch, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return target.Dest, pub, sub
}

// TestWorkerThroughBrokers sends 2,000 jobs through each real broker and
// checks that every job succeeds with exactly one stored result and one
// upstream call.
func TestWorkerThroughBrokers(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 jobs per broker; skipped with -short")
	}
	const n = 2000
	brokers := realBrokers
	for name, brokerURL := range brokers {
		t.Run(name, func(t *testing.T) {
			tb := setup(t, upstreamsim.Config{Seed: 8, Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: -1, TPM: -1}}})
			dest, pub, sub := openBroker(t, brokerURL(t), 256)
			w, err := worker.New(worker.Config{
				Subscriber: sub, Store: tb.store.Queue(), DeadLetters: tb.letters,
				Upstream:    upstreamAt(tb.sim.URL, 10*time.Second),
				Strategy:    shaping.StrategyRetry,
				MaxInFlight: 256,
				Logger:      slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry(),
			})
			require.NoError(t, err)
			require.NoError(t, w.Start(context.Background()))
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				require.NoError(t, w.Stop(ctx))
			})
			ids := make([]string, n)
			msgs := make([]transport.Message, n)
			for i := range n {
				ids[i] = fmt.Sprintf("%s-%04d", name, i)
				// Keyed by job id, so the jobs spread over the partitions.
				msgs[i] = transport.Message{Key: []byte(ids[i]), Value: jobJSON(ids[i], "gpt-4o-mini", "")}
			}
			require.NoError(t, pub.Publish(context.Background(), dest, msgs...))
			recs := tb.waitTerminal(t, ids, 3*time.Minute)
			for _, id := range ids {
				require.Equal(t, llmq.StatusSucceeded, recs[id].Status, id)
			}
			require.EqualValues(t, n, tb.sim.Sim.Stats().Total.Succeeded, "one upstream call per job")
			waitDrained(t, sub) // every message acked (Kafka: committed on every partition)
		})
	}
}
