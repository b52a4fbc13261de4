package dlq_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/memory"
	"github.com/llmq/llmq/worker"
)

// signalWriter passes letters to a dlq.Writer and reports each one handed
// over successfully.
type signalWriter struct {
	*dlq.Writer
	done chan dlq.Letter
}

func (w signalWriter) DeadLetter(ctx context.Context, l dlq.Letter) error {
	err := w.Writer.DeadLetter(ctx, l)
	if err == nil {
		w.done <- l
	}
	return err
}

// countingPublisher counts the messages published per destination.
type countingPublisher struct {
	transport.Publisher
	toMain atomic.Int64
}

func (p *countingPublisher) Publish(ctx context.Context, dest string, msgs ...transport.Message) error {
	err := p.Publisher.Publish(ctx, dest, msgs...)
	if err == nil && dest == "jobs" {
		p.toMain.Add(int64(len(msgs)))
	}
	return err
}

// newSim returns a simulator handler (not listening itself).
func newSim(t *testing.T, cfg upstreamsim.Config) http.Handler {
	t.Helper()
	sim, err := upstreamsim.New(cfg, upstreamsim.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	return sim.Handler()
}

// TestReplayAfterFaultsStop: a job dead-lettered while the simulator fails
// every call succeeds after a replay once the faults stop; replaying twice
// does not duplicate it.
func TestReplayAfterFaultsStop(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: worker, simulator, Postgres")
	}
	t.Parallel()
	ctx := context.Background()
	st, err := store.Open(ctx, storetest.NewDB(t))
	require.NoError(t, err)
	t.Cleanup(st.Close)

	// The upstream fails every call with a 500 until healthy is set; then a
	// second, fault-free simulator answers.
	failing := newSim(t, upstreamsim.Config{Faults: upstreamsim.FaultConfig{
		Rates: map[upstreamsim.FaultKind]float64{upstreamsim.FaultServerError: 1},
	}})
	working := newSim(t, upstreamsim.Config{})
	var healthy atomic.Bool
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if healthy.Load() {
			working.ServeHTTP(w, r)
			return
		}
		failing.ServeHTTP(w, r)
	}))
	t.Cleanup(upstream.Close)

	broker := memory.New()
	pub := &countingPublisher{Publisher: broker.NewPublisher()}
	dcfg := dlq.Config{Store: st.DeadLetters(), Publisher: pub, Destination: "jobs"}
	writer, err := dlq.NewWriter(dcfg)
	require.NoError(t, err)
	svc, err := dlq.NewService(dcfg)
	require.NoError(t, err)
	letters := signalWriter{Writer: writer, done: make(chan dlq.Letter, 10)}

	sub, err := broker.NewSubscriber("jobs", memory.Config{Prefetch: 8})
	require.NoError(t, err)
	w, err := worker.New(worker.Config{
		Subscriber: sub,
		Store:      st.Queue(),
		Upstream: worker.OpenAIUpstream(worker.NewOpenAIClient(worker.UpstreamConfig{
			BaseURL: upstream.URL + "/v1", APIKey: "sk-test", Timeout: 5 * time.Second,
		}), worker.ProviderOpenAI),
		DeadLetters: letters,
		Strategy:    shaping.StrategyRetry,
		MaxInFlight: 8,
		MaxAttempts: 3,
		Backoff:     worker.Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond, MaxRetryAfter: 5 * time.Millisecond},
		Logger:      slog.New(slog.DiscardHandler),
		Registerer:  prometheus.NewRegistry(),
	})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(sctx))
	})

	job := []byte(`{"id":"replay-me","tenant":"acme","body":{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"hello"}]}}`)
	require.NoError(t, pub.Publish(ctx, "jobs", transport.Message{Key: []byte("acme"), Value: job}))

	var l dlq.Letter
	select {
	case l = <-letters.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the job was not dead-lettered")
	}
	require.Equal(t, "replay-me", l.JobID)
	require.Equal(t, dlq.ReasonRetriesExhausted, l.Reason)
	require.Equal(t, 3, l.Attempts)
	rec, err := st.Jobs().Get(ctx, "acme", "replay-me")
	require.NoError(t, err)
	require.Equal(t, llmq.StatusDeadLettered, rec.Status)
	require.Equal(t, int64(1), broker.Depth("jobs.dlq"))

	recs, _, err := svc.List(ctx, store.DeadLetterListOptions{DeadLetterFilter: store.DeadLetterFilter{Tenant: "acme"}})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	// The letter carries the job as Postgres holds it, in its wire form.
	letter, err := llmq.Decode(recs[0].Message, llmq.DecodeOptions{})
	require.NoError(t, err)
	require.Equal(t, "replay-me", letter.ID)
	require.Equal(t, "acme", letter.Tenant)
	require.JSONEq(t, `{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"hello"}]}`, string(letter.Body))

	// The faults stop; the letter is replayed twice.
	healthy.Store(true)
	first, err := svc.Replay(ctx, "acme", recs[0].ID)
	require.NoError(t, err)
	require.True(t, first.Replayed)
	second, err := svc.Replay(ctx, "acme", recs[0].ID)
	require.NoError(t, err)
	require.False(t, second.Replayed)
	require.Equal(t, int64(2), pub.toMain.Load(), "the original publish and one replay")

	// The job runs again from attempt 1 (requeued in Postgres; the
	// republished message is a duplicate, acked at once), and succeeds.
	deadline := time.After(20 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for rec.Status != llmq.StatusSucceeded || broker.Depth("jobs") != 0 {
		select {
		case <-deadline:
			t.Fatalf("job is %s with %d messages on jobs after the replay, want succeeded and 0",
				rec.Status, broker.Depth("jobs"))
		case <-tick.C:
		}
		rec, err = st.Jobs().Get(ctx, "acme", "replay-me")
		require.NoError(t, err)
	}
	require.Equal(t, 1, rec.Attempts)
	require.NotEmpty(t, rec.Result)
	select {
	case l := <-letters.done:
		t.Fatalf("dead-lettered again: %+v", l)
	default:
	}

	// A third replay after success changes nothing.
	third, err := svc.Replay(ctx, "acme", recs[0].ID)
	require.NoError(t, err)
	require.False(t, third.Replayed)
	require.Equal(t, int64(2), pub.toMain.Load())
	rec, err = st.Jobs().Get(ctx, "acme", "replay-me")
	require.NoError(t, err)
	require.Equal(t, llmq.StatusSucceeded, rec.Status)
}
