package batchapi

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/memory"
	"github.com/llmq/llmq/worker"
)

// markLetters dead-letters through the store (what dlq's writer does).
type markLetters struct{ st *store.Store }

func (m markLetters) DeadLetter(ctx context.Context, l dlq.Letter) error {
	return m.st.MarkDeadLettered(ctx, l.JobID, string(l.Reason), l.LastError)
}

// TestWithWorker runs the real worker with the router: deferrable messages
// go to a batch that expires halfway, and the worker completes the other
// half live from the republished messages.
func TestWithWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sc := simConfig()
	sc.Batch.LinesPerSecond = 10
	sc.Batch.CompletionWindow = 10 * time.Second
	b := setup(t, sc, nil)

	sub, err := b.broker.NewSubscriber(b.queue, memory.Config{Prefetch: 64})
	require.NoError(t, err)
	w, err := worker.New(worker.Config{
		Subscriber:  sub,
		Store:       b.st,
		Upstream:    worker.OpenAIUpstream(worker.NewOpenAIClient(worker.UpstreamConfig{BaseURL: b.sim.URL, APIKey: "sk-test", Timeout: 5 * time.Second}), worker.ProviderOpenAI),
		DeadLetters: markLetters{b.st},
		Router:      b.router,
		Strategy:    shaping.StrategyRetry,
		Logger:      slog.New(slog.DiscardHandler),
		Registerer:  prometheus.NewRegistry(),
	})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(stop))
	})

	msgs := make([]transport.Message, 100)
	for i := range msgs {
		msgs[i] = transport.Message{Value: []byte(fmt.Sprintf(
			`{"id":"e2e-%03d","deferrable":true,"body":{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"label item %d"}]}}`, i, i))}
	}
	require.NoError(t, b.broker.NewPublisher().Publish(ctx, b.queue, msgs...))
	require.Eventually(t, func() bool {
		return b.countOrNeg(`lane = 'batch' AND status = 'queued' AND attempts = 0`) == 100 && b.broker.Depth(b.queue) == 0
	}, 10*time.Second, 5*time.Millisecond, "the worker routes every job to the batch lane and acks it")

	svc, err := New(b.cfg)
	require.NoError(t, err)
	n, err := svc.Collector().FlushAll(ctx)
	require.NoError(t, err)
	require.Equal(t, 100, n)
	b.clock.Advance(time.Minute)
	ps, err := svc.Poller().Poll(ctx)
	require.NoError(t, err)
	require.Equal(t, PollStats{Polled: 1, Ingested: 1, Stored: 50, Live: 50, Republished: 50}, ps)

	require.Eventually(t, func() bool { return b.countOrNeg(`status = 'succeeded'`) == 100 }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 50, b.count(t, `lane = 'batch' AND batch_id LIKE 'lb_%' AND attempts = 0`))
	require.Equal(t, 50, b.count(t, `lane = 'live' AND batch_id = '' AND attempts = 1 AND lane_reason LIKE '%batch_expired%'`))
	stats := b.sim.Sim.Stats().Total
	require.EqualValues(t, 50, stats.BatchLines)
	require.EqualValues(t, 50, stats.Succeeded, "the live half ran once each")
}
