package api_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
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

// gatewayBundle is a whole pipeline in gateway mode: the API (listening
// for ended jobs) on RabbitMQ and Postgres, and a worker calling the
// simulator, started by startWorker.
type gatewayBundle struct {
	*testBundle
	store       *store.Store
	reg         *prometheus.Registry
	startWorker func()
	// upstreamKey is the key the worker started next calls the simulator
	// with; the simulator takes sk-test only. outageLimit is its
	// OutageLimit.
	upstreamKey string
	outageLimit time.Duration
	sim         *upstreamsim.TestServer
	// headers are the headers of every answer the clients below got.
	mu      sync.Mutex
	headers []http.Header
}

// The simulator knows gpt-4o-mini only: another model is its 404.
var gatewayCatalog = llmq.Catalog{Models: map[string]llmq.Model{"gpt-4o-mini": {}, "gpt-4o": {}}}

func gatewaySetup(t *testing.T, gw api.GatewayConfig, producerOpts ...func(*producer.Config)) *gatewayBundle {
	t.Helper()
	return gatewaySetupEnv(t, gw, gatewayEnv{sim: upstreamsim.Config{Seed: 2, RestrictModels: true, APIKeys: []string{"sk-test"},
		Models: map[string]upstreamsim.ModelConfig{"gpt-4o-mini": {}}}}, producerOpts...)
}

// gatewayEnv is the simulator's configuration and the worker's catalog
// (its quotas; zero: none configured).
type gatewayEnv struct {
	sim        upstreamsim.Config
	catalog    llmq.Catalog
	rateLimits api.RateLimitConfig
	// strategy is the worker's ("": retry).
	strategy shaping.Strategy
	// tenants are the API's (their TPM quotas in the token headers).
	tenants llmq.Tenants
	// logger is the API's (nil: quiet).
	logger *slog.Logger
}

func gatewaySetupEnv(t testing.TB, gw api.GatewayConfig, env gatewayEnv, producerOpts ...func(*producer.Config)) *gatewayBundle {
	t.Helper()
	if testing.Short() {
		t.Skip("gateway: RabbitMQ, Postgres, worker, simulator")
	}
	ctx := context.Background()
	st := store.New(storetest.NewPool(t))
	sim := upstreamsim.NewTestServer(t, env.sim, upstreamsim.WithLogger(quiet))
	queue := rabbitmqtest.NewQueue(t)
	rcfg := rabbitmq.Config{URL: rabbitmqtest.URL(), Queue: queue, QueueType: rabbitmq.QueueClassic, Prefetch: 16, Logger: quiet}
	pub, err := rabbitmq.NewPublisher(rcfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	probe, err := rabbitmq.NewSubscriber(rcfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = probe.Close() })
	// Admission's now stands still (exact Retry-After); the store and the
	// worker keep the system clock.
	clk := clockwork.NewFakeClockAt(time.Now())
	pcfg := producer.Config{Publisher: pub, Store: st.Outbox(), Destination: queue, DepthProbe: probe, DepthTTL: -1,
		Clock: clk, Logger: quiet, Registerer: prometheus.NewRegistry(), Predict: st.LaneRates().PredictJob}
	for _, o := range producerOpts {
		o(&pcfg)
	}
	p, err := producer.New(pcfg)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	a, err := api.New(api.Config{Producer: p, Store: st.Jobs(), Keys: map[string]string{keyAcme: "acme"}, Catalog: gatewayCatalog,
		JobsDone: st.Jobs(), Gateway: gw, RateLimits: env.rateLimits, Usage: st.Budgets(), Tenants: env.tenants, Clock: clk, Logger: cmp.Or(env.logger, quiet), Registerer: reg})
	require.NoError(t, err)
	require.NoError(t, a.Start(ctx))
	srv := httptest.NewServer(a)
	t.Cleanup(func() {
		srv.Close()
		require.NoError(t, a.Stop(context.Background()))
	})
	b := &gatewayBundle{testBundle: &testBundle{srv: srv, api: a}, store: st, reg: reg, upstreamKey: "sk-test", sim: sim}
	b.startWorker = func() {
		workSub, err := rabbitmq.NewSubscriber(rcfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = workSub.Close() })
		letters, err := dlq.NewWriter(dlq.Config{Store: st.DeadLetters(), Publisher: pub, Destination: queue})
		require.NoError(t, err)
		w, err := worker.New(worker.Config{
			Subscriber: workSub, Store: st.Queue(), Queued: st.Queue(), LaneRates: st.LaneRates(), Chunks: st.Streams(), DeadLetters: letters, Strategy: cmp.Or(env.strategy, shaping.StrategyRetry), MaxInFlight: 16,
			Upstream: worker.OpenAIUpstream(worker.NewOpenAIClient(worker.UpstreamConfig{BaseURL: sim.URL,
				APIKey: b.upstreamKey, Timeout: 10 * time.Second}), worker.ProviderOpenAI),
			OutageLimit: b.outageLimit, Catalog: env.catalog, Logger: quiet, Registerer: prometheus.NewRegistry(),
		})
		require.NoError(t, err)
		require.NoError(t, w.Start(ctx))
		t.Cleanup(func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, w.Stop(sctx))
		})
	}
	return b
}

// RoundTrip adds the request headers of the test and keeps the answers'.
type headerTransport struct {
	b   *gatewayBundle
	add http.Header
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.add {
		r.Header[k] = v
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		h.b.mu.Lock()
		h.b.headers = append(h.b.headers, resp.Header.Clone())
		h.b.mu.Unlock()
	}
	return resp, err
}

// client is go-openai pointed at llmq with keyAcme, sending add.
func (b *gatewayBundle) client(add http.Header) *openai.Client {
	cfg := openai.DefaultConfig(keyAcme)
	cfg.BaseURL = b.srv.URL + "/v1"
	cfg.HTTPClient = &http.Client{Transport: headerTransport{b: b, add: add}, Timeout: 30 * time.Second}
	return openai.NewClientWithConfig(cfg)
}

func (b *gatewayBundle) lastHeader() http.Header {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.headers[len(b.headers)-1]
}

func chatRequest(model, prompt string) openai.ChatCompletionRequest {
	return openai.ChatCompletionRequest{Model: model, MaxCompletionTokens: 32,
		Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: prompt}}}
}

// TestGatewayGoOpenAI: go-openai pointed at llmq lists the models,
// creates a completion (the stored provider JSON, with x-llmq-job-id),
// streams one, and gets a permanent upstream error with the provider's
// status and code.
func TestGatewayGoOpenAI(t *testing.T) {
	t.Parallel()
	b := gatewaySetup(t, api.GatewayConfig{})
	b.startWorker()
	ctx := context.Background()
	c := b.client(nil)

	models, err := c.ListModels(ctx)
	require.NoError(t, err)
	require.Len(t, models.Models, 2)
	require.Equal(t, "gpt-4o", models.Models[0].ID)
	require.Equal(t, "gpt-4o-mini", models.Models[1].ID)

	resp, err := c.CreateChatCompletion(ctx, chatRequest("gpt-4o-mini", "what is a token bucket?"))
	require.NoError(t, err)
	id := resp.Header().Get("X-Llmq-Job-Id")
	require.NotEmpty(t, id)
	job := b.get(t, keyAcme, "/v1/jobs/"+id).json(t)
	require.Equal(t, "succeeded", job["status"])
	require.Equal(t, job["result"].(map[string]any)["id"], resp.ID, "the answer is the job's stored result")
	require.NotEmpty(t, resp.Choices[0].Message.Content)
	require.Equal(t, int(job["usage"].(map[string]any)["completion_tokens"].(float64)), resp.Usage.CompletionTokens)

	// A stream: the finished completion as chunks.
	s, err := c.CreateChatCompletionStream(ctx, chatRequest("gpt-4o-mini", "name three queues"))
	require.NoError(t, err)
	var content strings.Builder
	var finish openai.FinishReason
	for {
		ch, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		for _, choice := range ch.Choices {
			content.WriteString(choice.Delta.Content)
			if choice.FinishReason != "" {
				finish = choice.FinishReason
			}
		}
	}
	s.Close()
	sid := s.Header().Get("X-Llmq-Job-Id")
	stored := b.get(t, keyAcme, "/v1/jobs/"+sid).json(t)["result"].(map[string]any)["choices"].([]any)[0].(map[string]any)
	require.Equal(t, stored["message"].(map[string]any)["content"], content.String())
	require.Equal(t, stored["finish_reason"], string(finish))

	// A permanent upstream error: the simulator's 404, as it sent it.
	_, err = c.CreateChatCompletion(ctx, chatRequest("gpt-4o", "hi"))
	var apiErr *openai.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusNotFound, apiErr.HTTPStatusCode)
	require.Equal(t, "model_not_found", apiErr.Code)
	fid := b.lastHeader().Get("X-Llmq-Job-Id")
	require.Equal(t, "failed", b.get(t, keyAcme, "/v1/jobs/"+fid).json(t)["status"])

	// llmq's own refusal (a model the catalog does not allow), in
	// OpenAI's shape, before any job exists.
	_, err = c.CreateChatCompletion(ctx, chatRequest("gpt-3.5-turbo", "hi"))
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusBadRequest, apiErr.HTTPStatusCode)
	require.Equal(t, llmq.CodeModelNotAllowed, apiErr.Code)
	require.Equal(t, "model", *apiErr.Param)
	require.Empty(t, b.lastHeader().Get("X-Llmq-Job-Id"))
}

// TestGatewayProviderStatus: a permanent failure answers with the status
// the provider sent, not one guessed from its code. The simulator's 401
// for a call without a key has no code (type invalid_request_error, which
// alone would read as a 400).
func TestGatewayProviderStatus(t *testing.T) {
	t.Parallel()
	b := gatewaySetup(t, api.GatewayConfig{})
	// Within the outage limit a 401 holds the model's jobs (the key is
	// refused for all): with none, it fails the job at once.
	b.upstreamKey, b.outageLimit = "", -1
	b.startWorker()
	_, err := b.client(nil).CreateChatCompletion(context.Background(), chatRequest("gpt-4o-mini", "hi"))
	var apiErr *openai.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusUnauthorized, apiErr.HTTPStatusCode)
	require.Equal(t, "authentication_error", apiErr.Type)
	require.Equal(t, "invalid_request_error", apiErr.Code)
	// The provider's message as llmq stores every upstream error: with its
	// status, and sanitised (anything that reads as a credential masked).
	require.Equal(t, "HTTP 401: You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer "+
		"xxxxx (i.e. Authorization: xxxxx, or as the password field (with blank username) if you're accessing the API "+
		"from your browser and are prompted for a username. You can obtain an API key from "+
		"https://platform.openai.com/account/api-keys.", apiErr.Message)
	id := b.lastHeader().Get("X-Llmq-Job-Id")
	job := b.get(t, keyAcme, "/v1/jobs/"+id).json(t)
	require.Equal(t, "failed", job["status"])
	require.Equal(t, float64(http.StatusUnauthorized), job["error"].(map[string]any)["status"])
}

// TestGatewayDeadlineUnmeetable: when the predicted completion on the
// call's model lane passes the call's deadline the caller gets 429 deadline_unmeetable with Retry-After at
// once, and nothing is enqueued.
func TestGatewayDeadlineUnmeetable(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	b := gatewaySetupEnv(t, api.GatewayConfig{}, gatewayEnv{sim: upstreamsim.Config{Seed: 2, RestrictModels: true,
		APIKeys: []string{"sk-test"}, Models: map[string]upstreamsim.ModelConfig{"gpt-4o-mini": {}}},
		logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	ctx := context.Background()
	b.slowQueue(t, 3)
	b.slowLane(t)
	before, err := b.store.Jobs().CountByStatus(ctx, "acme", 0)
	require.NoError(t, err)

	c := b.client(http.Header{"X-Stainless-Timeout": {"60"}})
	start := time.Now()
	_, err = c.CreateChatCompletion(ctx, chatRequest("gpt-4o-mini", "hi"))
	var apiErr *openai.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Less(t, time.Since(start), 2*time.Second, "answered at once")
	require.Equal(t, http.StatusTooManyRequests, apiErr.HTTPStatusCode)
	require.Equal(t, api.CodeDeadlineUnmeetable, apiErr.Code)
	require.Equal(t, "rate_limit_error", apiErr.Type)
	require.Equal(t, "140", b.lastHeader().Get("Retry-After"))
	require.Contains(t, apiErr.Message, "the predicted completion (200 s: 0 jobs ahead on the model and 3 in flight")
	// The refusal is logged with its prediction's figures.
	var logged map[string]any
	for line := range strings.Lines(logs.String()) {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m))
		if m["msg"] == "api: deadline refused" {
			logged = m
		}
	}
	require.NotNil(t, logged, "logs: %s", logs.String())
	require.Equal(t, "/v1/chat/completions", logged["path"])
	for k, v := range map[string]float64{"predicted": float64(200 * time.Second), "retry_after": float64(140 * time.Second),
		"ahead": 0, "in_flight": 3, "rpm": 0.4, "concurrency": 3, "latency": float64(150 * time.Second),
		"call_latency": float64(150 * time.Second), "overhead": 0} {
		require.InDelta(t, v, logged[k], 1e-6, k)
	}
	after, err := b.store.Jobs().CountByStatus(ctx, "acme", 0)
	require.NoError(t, err)
	require.Equal(t, before, after, "nothing enqueued")

	// A deadline far enough is taken.
	b.startWorker()
	c = b.client(http.Header{"X-Llmq-Deadline": {time.Now().Add(20 * time.Minute).Format(time.RFC3339)}})
	_, err = c.CreateChatCompletion(ctx, chatRequest("gpt-4o-mini", "hi"))
	require.NoError(t, err)
}

// TestGatewayTenantQueueFull: a tenant at its hard share of the queue is
// refused as POST /v1/jobs refuses it, 429 tenant_queue_full with its own
// depth, not queue_full with the whole queue's.
func TestGatewayTenantQueueFull(t *testing.T) {
	t.Parallel()
	b := gatewaySetup(t, api.GatewayConfig{}, func(c *producer.Config) { c.SoftDepth, c.HardDepth = 2, 4 })
	ctx := context.Background()
	for _, id := range []string{"q-1", "q-2"} {
		j := &llmq.Job{ID: id, Tenant: "acme", Body: []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"x"}]}`)}
		require.NoError(t, j.Normalize())
		_, err := b.store.Jobs().Insert(ctx, j)
		require.NoError(t, err)
	}
	_, err := b.client(nil).CreateChatCompletion(ctx, chatRequest("gpt-4o-mini", "hi"))
	var apiErr *openai.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusTooManyRequests, apiErr.HTTPStatusCode)
	require.Equal(t, api.CodeTenantQueueFull, apiErr.Code)
	require.Equal(t, `tenant "acme" holds 2 jobs, at its share of the queue (2): retry later; other tenants are admitted`, apiErr.Message)
	require.Equal(t, "2", b.lastHeader().Get(api.HeaderQueueDepth))
	require.NotEmpty(t, b.lastHeader().Get("Retry-After"))
}

// slowQueue leaves two jobs finished in the rate window (5 min), 0.4 jobs
// a minute, and running ones held by a worker that makes no progress.
func (b *gatewayBundle) slowQueue(t *testing.T, running int) {
	t.Helper()
	ctx := context.Background()
	ids := []string{"done-1", "done-2"}
	for i := range running {
		ids = append(ids, fmt.Sprintf("run-%d", i+1))
	}
	for _, id := range ids {
		j := &llmq.Job{ID: id, Tenant: "acme", Body: []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"x"}]}`)}
		require.NoError(t, j.Normalize())
		_, err := b.store.Jobs().Insert(ctx, j)
		require.NoError(t, err)
		if strings.HasPrefix(id, "done") {
			_, err = b.store.Queue().StoreResult(ctx, store.Key{Tenant: "acme", ID: id}, store.Result{Response: []byte(`{}`)})
			require.NoError(t, err)
		}
	}
	held, err := b.store.Queue().Claim(ctx, store.ClaimRequest{Model: "gpt-4o-mini", Owner: "stuck", Lease: time.Hour, Limit: 10})
	require.NoError(t, err)
	require.Len(t, held, running)
}

// slowLane is the stuck worker's lane of gpt-4o-mini, rewritten every
// 100 ms until the test ends as a worker does: 3 calls at a time, all in
// flight, 150 s each. A call is predicted to complete in 200 s (the
// earliest of the three ends in 50 s on average, then the call's 150 s):
// less than the default timeout (10 min), more than a caller's 60 s, who
// gets a 429 with Retry-After 140.
func (b *gatewayBundle) slowLane(t *testing.T) {
	t.Helper()
	rate := store.LaneRate{Model: "gpt-4o-mini", RequestsPerMin: 0.4, Concurrency: 3, InFlight: 3, Latency: 150 * time.Second}
	require.NoError(t, b.store.LaneRates().SetLaneRates(context.Background(), "stuck", []store.LaneRate{rate}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				_ = b.store.LaneRates().SetLaneRates(ctx, "stuck", []store.LaneRate{rate})
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// TestGatewayCallerDisconnects: a caller that leaves while its job waits
// leaves a job that completes (default), or is cancelled when
// CancelOnDisconnect says so.
func TestGatewayCallerDisconnects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		cancel bool
		want   string
	}{{"completes", false, "succeeded"}, {"cancelled", true, "cancelled"}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := gatewaySetup(t, api.GatewayConfig{CancelOnDisconnect: tc.cancel})
			ctx, cancel := context.WithCancel(context.Background())
			called := make(chan error, 1)
			go func() {
				_, err := b.client(nil).CreateChatCompletion(ctx, chatRequest("gpt-4o-mini", "hi"))
				called <- err
			}()
			// The caller waits (no worker yet), then leaves.
			id := waitForJob(t, b)
			cancel()
			require.ErrorIs(t, <-called, context.Canceled)
			if tc.cancel {
				pollUntil(t, b.testBundle, id, tc.want)
				return
			}
			b.startWorker()
			pollUntil(t, b.testBundle, id, tc.want)
		})
	}
}

// waitForJob returns the id of acme's one job once it exists.
func waitForJob(t *testing.T, b *gatewayBundle) string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if recs, _, err := b.store.Jobs().List(context.Background(), store.ListOptions{Tenant: "acme"}); err == nil && len(recs) == 1 {
			return recs[0].ID
		}
		select {
		case <-deadline:
			t.Fatal("no job after 10s")
		case <-tick.C:
		}
	}
}

// TestGatewayColdStartAdmits: a plain SDK (go-openai, no llmq header) at
// a cold start, two jobs finished in the rate window and five running
// stuck, is admitted and answered: no lane knows its rate yet, so no
// completion is predicted. The queue's drain (5 jobs at 0.4 a minute,
// 12.5 min) would have refused it for its default deadline (10 min).
func TestGatewayColdStartAdmits(t *testing.T) {
	t.Parallel()
	b := gatewaySetup(t, api.GatewayConfig{})
	b.slowQueue(t, 5)
	b.startWorker()
	resp, err := b.client(nil).CreateChatCompletion(context.Background(), chatRequest("gpt-4o-mini", "hi"))
	require.NoError(t, err)
	require.NotEmpty(t, resp.Choices[0].Message.Content)
}

// TestGatewayRateLimitHeaders: every gateway answer carries the caller's
// tightest request limit as OpenAI sends its own (here the key's 3 a
// minute, under the tenant's 10), no token limit (none known), and a 429
// past it carries Retry-After. Admission's clock stands still: exact
// figures.
func TestGatewayRateLimitHeaders(t *testing.T) {
	t.Parallel()
	b := gatewaySetupEnv(t, api.GatewayConfig{}, gatewayEnv{sim: upstreamsim.Config{APIKeys: []string{"sk-test"}},
		rateLimits: api.RateLimitConfig{KeyRPM: 3, TenantRPM: 10}, tenants: llmq.Tenants{"acme": {Scope: llmq.Scope{TPM: 1000}}}})
	b.startWorker()
	c := b.client(nil)
	// The first call's answer counts no token yet (its own job finishes
	// after the headers); the next two count its tokens against acme's
	// TPM, the bucket refilling them in tokens/1000 of a minute.
	resp, err := c.CreateChatCompletion(context.Background(), chatRequest("gpt-4o-mini", "hi"))
	require.NoError(t, err)
	spent := resp.Usage.TotalTokens
	require.Positive(t, spent)
	tokens := []string{"1000", strconv.Itoa(1000 - spent), strconv.Itoa(1000 - spent)}
	tokenReset := (time.Duration(spent) * time.Minute / 1000).String()
	for i, reset := range []string{"20s", "40s", "1m0s"} {
		if i > 0 {
			_, err := c.ListModels(context.Background())
			require.NoError(t, err)
		}
		h := b.lastHeader()
		require.Equal(t, "3", h.Get("X-Ratelimit-Limit-Requests"))
		require.Equal(t, strconv.Itoa(2-i), h.Get("X-Ratelimit-Remaining-Requests"))
		require.Equal(t, reset, h.Get("X-Ratelimit-Reset-Requests"))
		require.Equal(t, "1000", h.Get("X-Ratelimit-Limit-Tokens"))
		require.Equal(t, tokens[i], h.Get("X-Ratelimit-Remaining-Tokens"))
		require.Equal(t, map[bool]string{true: "0s", false: tokenReset}[i == 0], h.Get("X-Ratelimit-Reset-Tokens"))
	}
	_, err = c.CreateChatCompletion(context.Background(), chatRequest("gpt-4o-mini", "hi"))
	var apiErr *openai.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusTooManyRequests, apiErr.HTTPStatusCode)
	h := b.lastHeader()
	require.Equal(t, "20", h.Get("Retry-After"))
	require.Equal(t, "0", h.Get("X-Ratelimit-Remaining-Requests"))
	require.Equal(t, "1m0s", h.Get("X-Ratelimit-Reset-Requests"))
	require.Empty(t, h.Get("X-Ratelimit-Limit-Tokens"), "refused at the door: no usage read")
}

// TestGatewayTokenHeadersNoQuota: a tenant without a TPM quota gets no
// -tokens header.
func TestGatewayTokenHeadersNoQuota(t *testing.T) {
	t.Parallel()
	b := gatewaySetupEnv(t, api.GatewayConfig{}, gatewayEnv{sim: upstreamsim.Config{APIKeys: []string{"sk-test"}},
		tenants: llmq.Tenants{"acme": {Scope: llmq.Scope{RPM: 100}}}})
	_, err := b.client(nil).ListModels(context.Background())
	require.NoError(t, err)
	h := b.lastHeader()
	require.NotEmpty(t, h.Get("X-Ratelimit-Limit-Requests"))
	for _, k := range []string{"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"} {
		require.Empty(t, h.Get(k), k)
	}
}
