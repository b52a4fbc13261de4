package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
	"github.com/llmq/llmq/transport/rabbitmq"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
	"github.com/llmq/llmq/worker"
)

// recorder keeps the body of every chat completion the simulator answered,
// by the request's first message content.
type recorder struct {
	mu        sync.Mutex
	responses map[string][]byte
}

type teeWriter struct {
	http.ResponseWriter
	buf bytes.Buffer
}

func (w *teeWriter) Write(b []byte) (int, error) {
	w.buf.Write(b)
	return w.ResponseWriter.Write(b)
}

func (rec *recorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		body := new(bytes.Buffer)
		_, _ = body.ReadFrom(r.Body)
		r.Body.Close()
		_ = json.Unmarshal(body.Bytes(), &req)
		r.Body = http.NoBody
		if body.Len() > 0 {
			r.Body = readCloser{bytes.NewReader(body.Bytes())}
		}
		tw := &teeWriter{ResponseWriter: w}
		h.ServeHTTP(tw, r)
		if len(req.Messages) > 0 {
			rec.mu.Lock()
			rec.responses[req.Messages[0].Content] = tw.buf.Bytes()
			rec.mu.Unlock()
		}
	})
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// TestEndToEnd: POST through the API to RabbitMQ, a real worker calls the
// simulator through go-openai, and polling returns succeeded with exactly
// the simulator's answer.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: RabbitMQ, Postgres, worker, simulator")
	}
	t.Parallel()
	ctx := context.Background()
	st := store.New(storetest.NewPool(t))
	sim := upstreamsim.NewTestServer(t, upstreamsim.Config{}, upstreamsim.WithLogger(quiet))
	rec := &recorder{responses: map[string][]byte{}}
	upstream := httptest.NewServer(rec.wrap(sim.Sim.Handler()))
	t.Cleanup(upstream.Close)

	queue := rabbitmqtest.NewQueue(t)
	rcfg := rabbitmq.Config{URL: rabbitmqtest.URL(), Queue: queue, QueueType: rabbitmq.QueueClassic, Prefetch: 16, Logger: quiet}
	pub, err := rabbitmq.NewPublisher(rcfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	probe, err := rabbitmq.NewSubscriber(rcfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = probe.Close() })
	workSub, err := rabbitmq.NewSubscriber(rcfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = workSub.Close() })

	reg := prometheus.NewRegistry()
	p, err := producer.New(producer.Config{Publisher: pub, Store: st.Outbox(), Destination: queue, DepthProbe: probe,
		Logger: quiet, Registerer: reg})
	require.NoError(t, err)
	a, err := api.New(api.Config{Producer: p, Store: st.Jobs(), Keys: map[string]string{keyAcme: "acme"}, Logger: quiet})
	require.NoError(t, err)
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)

	letters, err := dlq.NewWriter(dlq.Config{Store: st.DeadLetters(), Publisher: pub, Destination: queue})
	require.NoError(t, err)
	w, err := worker.New(worker.Config{
		Subscriber: workSub, Store: st.Queue(), DeadLetters: letters, Strategy: shaping.StrategyRetry, MaxInFlight: 16,
		Upstream: worker.OpenAIUpstream(worker.NewOpenAIClient(worker.UpstreamConfig{BaseURL: upstream.URL + "/v1", APIKey: "sk-test", Timeout: 10 * time.Second}), worker.ProviderOpenAI),
		Logger:   quiet, Registerer: prometheus.NewRegistry(),
	})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(sctx))
	})

	b := &testBundle{srv: srv}
	prompts := []string{"what is a token bucket?", "name three queues", "say hello"}
	ids := make([]string, len(prompts))
	for i, prompt := range prompts {
		r := b.post(t, keyAcme, `{"body":{"model":"gpt-4o-mini","max_tokens":32,"messages":[{"role":"user","content":"`+prompt+`"}]}}`)
		require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
		ids[i] = r.json(t)["id"].(string)
	}
	for i, id := range ids {
		job := pollUntil(t, b, id, "succeeded")
		rec.mu.Lock()
		answer := rec.responses[prompts[i]]
		rec.mu.Unlock()
		require.NotEmpty(t, answer, "the simulator answered %q", prompts[i])
		got, err := json.Marshal(job["result"])
		require.NoError(t, err)
		// The worker stores the response as go-openai decoded it: compare
		// what the simulator said, field by field.
		require.Equal(t, answerOf(t, answer), answerOf(t, got), "the stored result is the simulator's answer")
		require.Equal(t, answerOf(t, answer).Usage.CompletionTokens, int(job["usage"].(map[string]any)["completion_tokens"].(float64)))
		require.Equal(t, "gpt-4o-mini", job["used_model"])
	}
	// Finished jobs count in the completion rate.
	q := b.get(t, keyAcme, "/v1/queue").json(t)
	require.Equal(t, "ok", q["state"])
}

// chatAnswer is what a chat completion says.
type chatAnswer struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

func answerOf(t *testing.T, b []byte) chatAnswer {
	t.Helper()
	var a chatAnswer
	require.NoError(t, json.Unmarshal(b, &a))
	require.NotEmpty(t, a.ID)
	require.Len(t, a.Choices, 1)
	require.NotEmpty(t, a.Choices[0].Message.Content)
	return a
}

// pollUntil polls GET /v1/jobs/{id} as a client would until the job has the
// wanted status (failing on another terminal status) or 30 s pass.
func pollUntil(t *testing.T, b *testBundle, id, want string) map[string]any {
	t.Helper()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		r := b.get(t, keyAcme, "/v1/jobs/"+id)
		require.Equal(t, http.StatusOK, r.status)
		job := r.json(t)
		switch job["status"] {
		case want:
			return job
		case "failed", "dead_lettered", "expired", "cancelled":
			t.Fatalf("job %s ended %s: %v", id, job["status"], job["error"])
		}
		select {
		case <-deadline:
			t.Fatalf("job %s still %s after 30s", id, job["status"])
		case <-tick.C:
		}
	}
}
