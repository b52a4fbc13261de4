package worker_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/worker"
)

// TestBytesPostgresCannotHoldEndAsDeadLetters publishes, through each real
// broker, messages with a NUL or invalid UTF-8 in the tenant, the id or a
// header (text Postgres cannot hold): each ends as one dead letter with its
// raw bytes, the good job beside them succeeds, every message is acked, and
// none is handed back to the broker.
func TestBytesPostgresCannotHoldEndAsDeadLetters(t *testing.T) {
	t.Parallel()
	for name, brokerURL := range realBrokers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t, upstreamsim.Config{Seed: 4})
			dest, pub, sub := openBroker(t, brokerURL(t), 16)
			letters, err := dlq.NewWriter(dlq.Config{Store: tb.store.DeadLetters(), Publisher: pub, Destination: dest})
			require.NoError(t, err)
			reg := prometheus.NewRegistry()
			w, err := worker.New(worker.Config{
				Subscriber: sub, Store: tb.store.Queue(), DeadLetters: letters,
				Upstream: upstreamAt(tb.sim.URL, 10*time.Second), Strategy: shaping.StrategyRetry,
				Logger: slog.New(slog.DiscardHandler), Registerer: reg,
			})
			require.NoError(t, err)
			require.NoError(t, w.Start(context.Background()))
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				require.NoError(t, w.Stop(ctx))
			})

			body := `"body":{"model":"gpt-4o-mini","max_tokens":8,"messages":[{"role":"user","content":"x"}]}`
			bad := []transport.Message{
				{Value: []byte(`{"id":"p1","tenant":"a\u0000b",` + body + `}`)},
				{Value: []byte(`{"id":"p2","tenant":"a` + "\xff\xfe" + `b",` + body + `}`)},
				{Value: []byte(`{"id":"p3\u0000",` + body + `}`)},
				{Value: []byte(`{"id":"p4","tenant":"a` + "\x00" + `b",` + body + `}`)},
				{Value: []byte(`{"id":"p5","tenant":"x y",` + body + `}`), Headers: map[string]string{"trace": "a\x00b", "k\xffey": "v\xfe"}},
			}
			good := transport.Message{Value: jobJSON("good-1", "gpt-4o-mini", "")}
			require.NoError(t, pub.Publish(context.Background(), dest, append(bad, good)...))

			tb.waitTerminal(t, []string{"good-1"}, 30*time.Second)
			require.Equal(t, llmq.StatusSucceeded, tb.get(t, "good-1").Status)
			require.Eventually(t, func() bool {
				var n int
				err := tb.store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM dead_letters`).Scan(&n)
				return err == nil && n == len(bad)
			}, 20*time.Second, 10*time.Millisecond, "one dead letter per message")
			for _, m := range bad {
				var reason string
				var headers map[string]string
				require.NoError(t, tb.store.Pool().QueryRow(context.Background(),
					`SELECT reason, headers FROM dead_letters WHERE message = $1`, m.Value).Scan(&reason, &headers),
					"the raw bytes of %q are kept", m.Value)
				require.Equal(t, string(dlq.ReasonPoison), reason)
				if m.Headers != nil {
					require.Equal(t, map[string]string{"trace": `a\x00b`, `k\xffey`: `v\xfe`}, headers, "headers escaped")
				}
			}
			waitDrained(t, sub)
			require.Contains(t, metricsText(t, reg), "\nllmq_ingest_handed_back_total 0\n", "no message handed back to the broker")
		})
	}
}
