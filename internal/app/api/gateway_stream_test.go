package api_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	openai "github.com/sashabaranov/go-openai"
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

// streamBundle is gateway mode with real streaming: the API and the worker
// each with a pool of its own on one database (as two processes have), and
// the simulator, whose streams run hook.
type streamBundle struct {
	srv *httptest.Server
	api *api.API
	sim *upstreamsim.TestServer
}

func streamSetup(t testing.TB, hook upstreamsim.StreamHook, latency upstreamsim.LatencyConfig) *streamBundle {
	t.Helper()
	if testing.Short() {
		t.Skip("gateway streaming: RabbitMQ, Postgres, worker, simulator")
	}
	ctx := context.Background()
	dbURL := storetest.NewDB(t)
	pool := func() *store.Store {
		p, err := pgxpool.New(ctx, dbURL)
		require.NoError(t, err)
		t.Cleanup(p.Close)
		return store.New(p)
	}
	apiStore, workerStore := pool(), pool()
	var opts []upstreamsim.Option
	if hook != nil {
		opts = append(opts, upstreamsim.WithStreamHook(hook))
	}
	sim := upstreamsim.NewTestServer(t, upstreamsim.Config{Seed: 3, RestrictModels: true, APIKeys: []string{"sk-test"},
		Latency: latency, Models: map[string]upstreamsim.ModelConfig{"gpt-4o-mini": {}}}, append(opts, upstreamsim.WithLogger(quiet))...)
	queue := rabbitmqtest.NewQueue(t)
	rcfg := rabbitmq.Config{URL: rabbitmqtest.URL(), Queue: queue, QueueType: rabbitmq.QueueClassic, Prefetch: 16, Logger: quiet}
	pub, err := rabbitmq.NewPublisher(rcfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	probe, err := rabbitmq.NewSubscriber(rcfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = probe.Close() })
	p, err := producer.New(producer.Config{Publisher: pub, Store: apiStore.Outbox(), Destination: queue, DepthProbe: probe, DepthTTL: -1,
		Clock: clockwork.NewRealClock(), Logger: quiet, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	a, err := api.New(api.Config{Producer: p, Store: apiStore.Jobs(), Keys: map[string]string{keyAcme: "acme"}, Catalog: gatewayCatalog,
		JobsDone: apiStore.Jobs(), Streams: apiStore.Streams(), Logger: quiet, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	require.NoError(t, a.Start(ctx))
	srv := httptest.NewServer(a)
	t.Cleanup(func() {
		srv.Close()
		require.NoError(t, a.Stop(context.Background()))
	})

	workSub, err := rabbitmq.NewSubscriber(rcfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = workSub.Close() })
	letters, err := dlq.NewWriter(dlq.Config{Store: workerStore.DeadLetters(), Publisher: pub, Destination: queue})
	require.NoError(t, err)
	w, err := worker.New(worker.Config{
		Subscriber: workSub, Store: workerStore.Queue(), Queued: workerStore.Queue(), Chunks: workerStore.Streams(), DeadLetters: letters, Strategy: shaping.StrategyRetry, MaxInFlight: 16,
		Upstream: worker.OpenAIUpstream(worker.NewOpenAIClient(worker.UpstreamConfig{BaseURL: sim.URL,
			APIKey: "sk-test", Timeout: 10 * time.Second}), worker.ProviderOpenAI),
		Logger: quiet, Registerer: prometheus.NewRegistry(),
	})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(sctx))
	})
	return &streamBundle{srv: srv, api: a, sim: sim}
}

// sseStream is a streamed call's answer, read event by event.
type sseStream struct {
	resp *http.Response
	r    *bufio.Reader
}

// stream posts a streamed call (with the usage chunk) on ctx.
func (b *streamBundle) stream(t testing.TB, ctx context.Context, prompt string) *sseStream {
	t.Helper()
	body := `{"model":"gpt-4o-mini","max_completion_tokens":64,"stream":true,"stream_options":{"include_usage":true},` +
		`"messages":[{"role":"user","content":"` + prompt + `"}]}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.srv.URL+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+keyAcme)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	return &sseStream{resp: resp, r: bufio.NewReader(resp.Body)}
}

// next returns the next event's data ("" at the end of the body).
func (s *sseStream) next(t testing.TB) string {
	t.Helper()
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return ""
		}
		if d, ok := strings.CutPrefix(strings.TrimSpace(line), "data: "); ok {
			return d
		}
	}
}

// streamChunk is what the tests read of a chunk.
type streamChunk struct {
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

func decodeChunk(t testing.TB, data string) streamChunk {
	t.Helper()
	var c streamChunk
	require.NoError(t, json.Unmarshal([]byte(data), &c), data)
	return c
}

// holdAt is a hook that, at chunk n of the first stream, tells reached
// and waits for release or for the stream's caller to leave (then tells
// left).
func holdAt(n int, reached, release, left chan struct{}) upstreamsim.StreamHook {
	return func(ctx context.Context, chunk int) error {
		if chunk != n {
			return nil
		}
		close(reached)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			close(left)
			return ctx.Err()
		}
	}
}

// TestStreamChunksAsTheyCome: a streamed call's first chunks reach the
// caller while the provider still holds the rest; the stream ends with
// the usage and [DONE]; the job stores the assembled completion and the
// call's usage from the usage chunk.
func TestStreamChunksAsTheyCome(t *testing.T) {
	t.Parallel()
	reached, release, left := make(chan struct{}), make(chan struct{}), make(chan struct{})
	b := streamSetup(t, holdAt(3, reached, release, left), upstreamsim.LatencyConfig{})
	free := sync.OnceFunc(func() { close(release) })
	t.Cleanup(free) // before the simulator stops
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := b.stream(t, ctx, "name three queues")
	var content strings.Builder
	for range 2 {
		c := decodeChunk(t, s.next(t))
		content.WriteString(c.Choices[0].Delta.Content)
	}
	select {
	case <-reached:
	case <-ctx.Done():
		t.Fatal("the simulator never reached chunk 3")
	}
	// Two chunks came while the simulator holds the third.
	require.NotEmpty(t, content.String())
	free()
	var usage *streamChunk
	for {
		d := s.next(t)
		require.NotEmpty(t, d, "the stream ended without [DONE]")
		if d == "[DONE]" {
			break
		}
		c := decodeChunk(t, d)
		if len(c.Choices) > 0 {
			content.WriteString(c.Choices[0].Delta.Content)
		}
		if c.Usage != nil {
			usage = &c
		}
	}
	require.NotNil(t, usage, "include_usage: the last chunk holds the usage")
	id := s.resp.Header.Get(api.HeaderJobID)
	bundle := &testBundle{srv: b.srv, api: b.api}
	job := bundle.get(t, keyAcme, "/v1/jobs/"+id).json(t)
	require.Equal(t, "succeeded", job["status"])
	msg := job["result"].(map[string]any)["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	require.Equal(t, content.String(), msg["content"], "the stored result is the assembled completion")
	require.Equal(t, "chat.completion", job["result"].(map[string]any)["object"])
	u := job["usage"].(map[string]any)
	require.Equal(t, float64(usage.Usage.PromptTokens), u["prompt_tokens"])
	require.Equal(t, float64(usage.Usage.CompletionTokens), u["completion_tokens"])
	call := job["calls"].([]any)[0].(map[string]any)
	require.Equal(t, float64(usage.Usage.CompletionTokens), call["completion_tokens"], "the call is settled from the usage chunk")
	select {
	case <-left:
		t.Fatal("the call was cut")
	default:
	}
}

// TestStreamDisconnectCancelsUpstream: a caller that leaves mid-stream
// cuts the upstream call (the simulator sees its client leave) and the job
// fails as client_disconnected, charged the chunks it used.
func TestStreamDisconnectCancelsUpstream(t *testing.T) {
	t.Parallel()
	reached, release, left := make(chan struct{}), make(chan struct{}), make(chan struct{})
	b := streamSetup(t, holdAt(3, reached, release, left), upstreamsim.LatencyConfig{})
	free := sync.OnceFunc(func() { close(release) })
	t.Cleanup(free) // before the simulator stops
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	callCtx, leave := context.WithCancel(ctx)
	s := b.stream(t, callCtx, "name three queues")
	for range 2 {
		decodeChunk(t, s.next(t))
	}
	select {
	case <-reached:
	case <-ctx.Done():
		t.Fatal("the simulator never reached chunk 3")
	}
	id := s.resp.Header.Get(api.HeaderJobID)
	leave()
	select {
	case <-left:
	case <-ctx.Done():
		t.Fatal("the simulator never saw the call cut")
	}
	bundle := &testBundle{srv: b.srv, api: b.api}
	job := pollUntil(t, bundle, id, "failed")
	require.Equal(t, "failed", job["status"])
	require.Equal(t, worker.CodeClientDisconnected, job["error"].(map[string]any)["code"])
	call := job["calls"].([]any)[0].(map[string]any)
	require.Equal(t, float64(2), call["completion_tokens"], "charged one token per content chunk sent")
	require.Positive(t, call["prompt_tokens"], "charged the prompt")
}

// TestStreamUpstreamErrorMidStream: the provider's error after the first
// chunks reaches the caller as an error event in OpenAI's shape, and the
// call is not retried (the caller saw part of it).
func TestStreamUpstreamErrorMidStream(t *testing.T) {
	t.Parallel()
	b := streamSetup(t, func(_ context.Context, chunk int) error {
		if chunk == 3 {
			return errors.New("the model server went away")
		}
		return nil
	}, upstreamsim.LatencyConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := b.stream(t, ctx, "name three queues")
	for range 2 {
		decodeChunk(t, s.next(t))
	}
	d := s.next(t)
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	require.NoError(t, json.NewDecoder(bytes.NewReader([]byte(d))).Decode(&e), d)
	require.Equal(t, "the model server went away", e.Error.Message)
	require.Equal(t, "server_error", e.Error.Type)
	require.Empty(t, s.next(t), "no [DONE] after the error")
	require.Equal(t, int64(1), b.sim.Sim.Stats().Total.Accepted, "not retried")
}

// BenchmarkGatewayStreamTTFB measures the time to the first chunk of a
// streamed call, directly from the simulator (its time to first token,
// 200 ms) and through llmq (API, broker, worker, job_chunks, NOTIFY), one
// call at a time with the quota's room; it reports the p50 of each, and
// splits llmq's into the wait before the upstream call and the relay. Run: go test -run '^$' -bench GatewayStreamTTFB
// -benchtime 40x ./internal/app/api/
func BenchmarkGatewayStreamTTFB(b *testing.B) {
	const ttft = 200 * time.Millisecond
	sb := streamSetup(b, nil, upstreamsim.LatencyConfig{TTFT: ttft, PerToken: time.Millisecond})
	// first returns the time to the first chunk and, through llmq, the
	// time from the request to the upstream call's start.
	first := func(url, key, body string) (ttfb, queued time.Duration) {
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		require.NoError(b, err)
		req.Header.Set("Authorization", "Bearer "+key)
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		require.NoError(b, err)
		defer resp.Body.Close()
		s := &sseStream{resp: resp, r: bufio.NewReader(resp.Body)}
		require.NotEmpty(b, s.next(b))
		ttfb = time.Since(start)
		for s.next(b) != "" { // read to the end: the call ends before the next
		}
		if id := resp.Header.Get(api.HeaderJobID); id != "" {
			b.StopTimer()
			greq, err := http.NewRequest(http.MethodGet, sb.srv.URL+"/v1/jobs/"+id, nil)
			require.NoError(b, err)
			greq.Header.Set("Authorization", "Bearer "+keyAcme)
			gresp, err := http.DefaultClient.Do(greq)
			require.NoError(b, err)
			var job map[string]any
			require.NoError(b, json.NewDecoder(gresp.Body).Decode(&job))
			_ = gresp.Body.Close()
			began, err := time.Parse(time.RFC3339Nano, job["calls"].([]any)[0].(map[string]any)["started_at"].(string))
			require.NoError(b, err)
			queued = began.Sub(start)
			b.StartTimer()
		}
		return ttfb, queued
	}
	body := `{"model":"gpt-4o-mini","max_completion_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	var direct, through, queued, relay []time.Duration
	// One call each to warm the connections and the lane.
	first(sb.sim.URL+"/chat/completions", "sk-test", body)
	first(sb.srv.URL+"/v1/chat/completions", keyAcme, body)
	b.ResetTimer()
	for range b.N {
		d, _ := first(sb.sim.URL+"/chat/completions", "sk-test", body)
		l, q := first(sb.srv.URL+"/v1/chat/completions", keyAcme, body)
		direct, through, queued, relay = append(direct, d), append(through, l), append(queued, q), append(relay, l-q-d)
	}
	b.StopTimer()
	p50 := func(ds []time.Duration) float64 {
		ds = slices.Clone(ds)
		slices.Sort(ds)
		return float64(ds[len(ds)/2]) / float64(time.Millisecond)
	}
	b.ReportMetric(p50(direct), "direct-p50-ms")
	b.ReportMetric(p50(through), "llmq-p50-ms")
	// queued: from the request to the upstream call's start (publish,
	// broker, claim, admission); relay: the rest past the provider's
	// time to first token (job_chunks, NOTIFY, the API's read).
	b.ReportMetric(p50(queued), "queued-p50-ms")
	b.ReportMetric(p50(relay), "relay-p50-ms")
	b.ReportMetric(0, "ns/op")
}

// TestStreamDisconnectBeforeFirstChunk: a caller that leaves while the
// provider has sent nothing yet cuts the call as well (the worker asks
// while it waits), and the job is not retried.
func TestStreamDisconnectBeforeFirstChunk(t *testing.T) {
	t.Parallel()
	reached, release, left := make(chan struct{}), make(chan struct{}), make(chan struct{})
	b := streamSetup(t, holdAt(1, reached, release, left), upstreamsim.LatencyConfig{})
	t.Cleanup(sync.OnceFunc(func() { close(release) }))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	callCtx, leave := context.WithCancel(ctx)
	body := `{"model":"gpt-4o-mini","max_completion_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	req, err := http.NewRequestWithContext(callCtx, http.MethodPost, b.srv.URL+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+keyAcme)
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		done <- err
	}()
	select {
	case <-reached:
	case <-ctx.Done():
		t.Fatal("the simulator never reached chunk 1")
	}
	leave()
	require.ErrorIs(t, <-done, context.Canceled, "no header before the first chunk")
	select {
	case <-left:
	case <-ctx.Done():
		t.Fatal("the simulator never saw the call cut")
	}
	bundle := &testBundle{srv: b.srv, api: b.api}
	jobs := bundle.get(t, keyAcme, "/v1/jobs").json(t)["data"].([]any)
	require.Len(t, jobs, 1)
	job := pollUntil(t, bundle, jobs[0].(map[string]any)["id"].(string), "failed")
	require.Equal(t, worker.CodeClientDisconnected, job["error"].(map[string]any)["code"])
	require.Len(t, job["calls"], 1, "not retried")
	require.Equal(t, float64(0), job["calls"].([]any)[0].(map[string]any)["completion_tokens"])
}

// TestStreamGoOpenAI: go-openai as the caller of a streamed call (what an
// agent written in Go sends: stream_options.include_usage): its first
// chunks come while the provider holds the rest, the content it assembles
// is the stored completion, its usage the job's.
func TestStreamGoOpenAI(t *testing.T) {
	t.Parallel()
	reached, release, left := make(chan struct{}), make(chan struct{}), make(chan struct{})
	b := streamSetup(t, holdAt(3, reached, release, left), upstreamsim.LatencyConfig{})
	free := sync.OnceFunc(func() { close(release) })
	t.Cleanup(free) // before the simulator stops
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := openai.DefaultConfig(keyAcme)
	cfg.BaseURL = b.srv.URL + "/v1"
	req := openai.ChatCompletionRequest{Model: "gpt-4o-mini", MaxCompletionTokens: 64, Stream: true,
		StreamOptions: &openai.StreamOptions{IncludeUsage: true},
		Messages:      []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "name three queues"}}}
	s, err := openai.NewClientWithConfig(cfg).CreateChatCompletionStream(ctx, req)
	require.NoError(t, err)
	defer s.Close()
	var content strings.Builder
	for range 2 {
		c, err := s.Recv()
		require.NoError(t, err)
		content.WriteString(c.Choices[0].Delta.Content)
	}
	select {
	case <-reached:
	case <-ctx.Done():
		t.Fatal("the simulator never reached chunk 3")
	}
	require.NotEmpty(t, content.String(), "two chunks came while the provider holds the third")
	free()
	var usage *openai.Usage
	var finish openai.FinishReason
	for {
		c, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		for _, choice := range c.Choices {
			content.WriteString(choice.Delta.Content)
			finish = cmp.Or(choice.FinishReason, finish)
		}
		if c.Usage != nil {
			usage = c.Usage
		}
	}
	require.NotNil(t, usage, "include_usage: the last chunk holds the usage")
	job := (&testBundle{srv: b.srv, api: b.api}).get(t, keyAcme, "/v1/jobs/"+s.Header().Get(api.HeaderJobID)).json(t)
	require.Equal(t, "succeeded", job["status"])
	choice := job["result"].(map[string]any)["choices"].([]any)[0].(map[string]any)
	require.Equal(t, content.String(), choice["message"].(map[string]any)["content"])
	require.Equal(t, string(finish), choice["finish_reason"])
	require.Equal(t, float64(usage.CompletionTokens), job["usage"].(map[string]any)["completion_tokens"])
}
