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

// storeLetters dead-letters through the store (what dlq's writer does).
type storeLetters struct{ st *store.Store }

func (m storeLetters) DeadLetter(ctx context.Context, l dlq.Letter) error {
	_, _, err := m.st.DeadLetters().RecordDeadLetter(ctx, store.NewDeadLetter{KeyBase: "job:" + l.Tenant + "/" + l.JobID, JobID: l.JobID,
		Tenant: l.Tenant, LeaseToken: l.LeaseToken, Reason: string(l.Reason), LastError: l.LastError, Message: l.Message})
	return err
}

// laneRouter is the router as the worker asks it, at the batch lane's
// clock (the worker runs on the real one).
type laneRouter struct{ b *testBundle }

func (r laneRouter) Hold(_ time.Time, drain time.Duration) worker.BatchHold {
	h := r.b.router.Hold(r.b.lane.Now(), drain)
	return worker.BatchHold{Hold: h.Batch, DeadlineAfter: h.DeadlineAfter, LiveReason: h.LiveReason}
}

// TestWithWorker runs the real worker with the router: the deferrable jobs
// it ingests wait for the batch lane, go to a batch that expires halfway,
// and the worker completes the other half live, claimed from Postgres.
func TestWithWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sc := simConfig()
	sc.Batch.LinesPerSecond = 10
	sc.Batch.CompletionWindow = 10 * time.Second
	b := setup(t, sc, nil)

	broker, queue := memory.New(), "jobs"
	sub, err := broker.NewSubscriber(queue, memory.Config{Prefetch: 64})
	require.NoError(t, err)
	w, err := worker.New(worker.Config{
		Subscriber:  sub,
		Store:       b.st.Queue(),
		Upstream:    worker.OpenAIUpstream(worker.NewOpenAIClient(worker.UpstreamConfig{BaseURL: b.sim.URL, APIKey: "sk-test", Timeout: 5 * time.Second}), worker.ProviderOpenAI),
		DeadLetters: storeLetters{b.st},
		Router:      laneRouter{b},
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
	require.NoError(t, broker.NewPublisher().Publish(ctx, queue, msgs...))
	require.Eventually(t, func() bool {
		return b.countOrNeg(`status = 'queued' AND lane_reason = ''`) == 100 && broker.Depth(queue) == 0
	}, 10*time.Second, 5*time.Millisecond, "the worker records and acks every message, and holds the jobs for the batch lane")
	require.Zero(t, b.sim.Sim.Stats().Total.Accepted, "no live call")

	svc, err := New(b.cfg)
	require.NoError(t, err)
	n, err := svc.Collector().FlushAll(ctx)
	require.NoError(t, err)
	require.Equal(t, 100, n)
	b.clock.Advance(time.Minute)
	ps, err := svc.Poller().Poll(ctx)
	require.NoError(t, err)
	require.Equal(t, PollStats{Polled: 1, Ingested: 1, Stored: 50, Live: 50}, ps)

	require.Eventually(t, func() bool { return b.countOrNeg(`status = 'succeeded'`) == 100 }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 50, b.count(t, `lane = 'batch' AND batch_id LIKE 'lb_%' AND attempts = 0`))
	require.Equal(t, 50, b.count(t, `lane = 'live' AND batch_id = '' AND attempts = 1 AND lane_reason LIKE '%batch_expired%'`))
	stats := b.sim.Sim.Stats().Total
	require.EqualValues(t, 50, stats.BatchLines)
	require.EqualValues(t, 50, stats.Succeeded, "the live half ran once each")
}
