package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/kafka/kafkatest"
	"github.com/llmq/llmq/transport/open"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
	"github.com/llmq/llmq/worker"
)

// BenchmarkPipeline measures jobs/s end to end: broker → worker → simulator
// (instant, no quota) → Postgres → ack. b.N jobs are published up front and
// the clock runs until the last one is stored.
func BenchmarkPipeline(b *testing.B) {
	brokers := map[string]func(b *testing.B) string{
		"rabbitmq": func(b *testing.B) string {
			return rabbitmqtest.BrokerURL(rabbitmqtest.NewQueue(b))
		},
		"memory": func(b *testing.B) string { return "memory://bench-" + uuid.NewString()[:8] + "/jobs" },
		"kafka": func(b *testing.B) string {
			addrs := kafkatest.NewCluster(b)
			return "kafka://" + strings.Join(addrs, ",") + "/" + kafkatest.NewTopic(b, addrs, 8)
		},
	}
	for _, name := range []string{"memory", "kafka", "rabbitmq"} {
		b.Run(name, func(b *testing.B) {
			tb := setup(b, upstreamsim.Config{Seed: 10, Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: -1, TPM: -1}}})
			url := brokers[name](b)
			target, err := open.Parse(url)
			require.NoError(b, err)
			pub, sub, err := open.Open(context.Background(), url, open.Options{Prefetch: 512, Logger: slog.New(slog.DiscardHandler)})
			require.NoError(b, err)
			defer pub.Close()
			msgs := make([]transport.Message, b.N)
			for i := range msgs {
				msgs[i] = transport.Message{Value: jobJSON(fmt.Sprintf("bench-%s-%d", name, i), "gpt-4o-mini", "")}
			}
			require.NoError(b, pub.Publish(context.Background(), target.Dest, msgs...))
			w, err := worker.New(worker.Config{
				Subscriber: sub, Store: tb.store, DeadLetters: tb.letters,
				Client:      worker.NewOpenAIClient(worker.UpstreamConfig{BaseURL: tb.sim.URL, APIKey: "sk-bench", Timeout: 30 * time.Second}),
				Strategy:    shaping.StrategyRetry,
				MaxInFlight: 512,
				Logger:      slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry(),
			})
			require.NoError(b, err)
			b.ResetTimer()
			require.NoError(b, w.Start(context.Background()))
			for {
				var done int
				require.NoError(b, tb.store.Pool().QueryRow(context.Background(),
					`SELECT count(*) FROM jobs WHERE status = 'succeeded'`).Scan(&done))
				if done == b.N {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			require.NoError(b, w.Stop(ctx))
		})
	}
}
