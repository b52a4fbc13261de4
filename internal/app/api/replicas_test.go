package api_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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

// TestAPIReplicasOneDatabase: two API replicas (each its own pool,
// producer and listening connection) on one database and one queue, a
// worker behind them, work as one (docs/design/scale.md): a gateway call
// to either is answered when the worker ends its job, whichever replica
// took it; a job posted to one is read from the other; the key and tenant
// limits are shared: what one let through is taken from the other's
// buckets at its next exchange, and a replica that limits alone (no
// ledger) lets a key through past its limit.
// keyGlobex2 is a second key of tenant globex, keyInitech tenant
// initech's.
const keyGlobex2, keyInitech = "key-globex-2", "key-initech"

func TestAPIReplicasOneDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("two APIs, a worker: RabbitMQ, Postgres, simulator")
	}
	t.Parallel()
	ctx := context.Background()
	first := storetest.NewPool(t)
	sim := upstreamsim.NewTestServer(t, upstreamsim.Config{Seed: 2, RestrictModels: true, APIKeys: []string{"sk-test"},
		Models: map[string]upstreamsim.ModelConfig{"gpt-4o-mini": {}}}, upstreamsim.WithLogger(quiet))
	queue := rabbitmqtest.NewQueue(t)
	rcfg := rabbitmq.Config{URL: rabbitmqtest.URL(), Queue: queue, QueueType: rabbitmq.QueueClassic, Prefetch: 16, Logger: quiet}
	type replicaBundle struct {
		*testBundle
		reg *prometheus.Registry
	}
	replica := func(limits api.LimitLedger) replicaBundle {
		pool, err := pgxpool.New(ctx, first.Config().ConnString())
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		st := store.New(pool)
		pub, err := rabbitmq.NewPublisher(rcfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = pub.Close() })
		probe, err := rabbitmq.NewSubscriber(rcfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = probe.Close() })
		p, err := producer.New(producer.Config{Publisher: pub, Store: st.Outbox(), Destination: queue, DepthProbe: probe, DepthTTL: -1,
			Predict: st.LaneRates().PredictJob, Logger: quiet, Registerer: prometheus.NewRegistry()})
		require.NoError(t, err)
		reg := prometheus.NewRegistry()
		a, err := api.New(api.Config{Producer: p, Store: st.Jobs(), Keys: map[string]string{keyAcme: "acme", keyGlobex: "globex", keyGlobex2: "globex", keyInitech: "initech"},
			Catalog: gatewayCatalog, JobsDone: st.Jobs(), RateLimits: api.RateLimitConfig{KeyRPM: 4, TenantRPM: 6},
			Limits: limits, LimitPeriod: 20 * time.Millisecond, Logger: quiet, Registerer: reg})
		require.NoError(t, err)
		require.NoError(t, a.Start(ctx))
		srv := httptest.NewServer(a)
		t.Cleanup(func() {
			srv.Close()
			require.NoError(t, a.Stop(context.Background()))
		})
		return replicaBundle{testBundle: &testBundle{srv: srv, api: a, store: st}, reg: reg}
	}
	a, b := replica(store.New(first).Ledger()), replica(store.New(first).Ledger())

	st := store.New(first)
	sub, err := rabbitmq.NewSubscriber(rcfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	pub, err := rabbitmq.NewPublisher(rcfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	letters, err := dlq.NewWriter(dlq.Config{Store: st.DeadLetters(), Publisher: pub, Destination: queue})
	require.NoError(t, err)
	w, err := worker.New(worker.Config{Subscriber: sub, Store: st.Queue(), LaneRates: st.LaneRates(), DeadLetters: letters, Strategy: shaping.StrategyRetry,
		MaxInFlight: 16, Upstream: worker.OpenAIUpstream(worker.NewOpenAIClient(worker.UpstreamConfig{BaseURL: sim.URL,
			APIKey: "sk-test", Timeout: 10 * time.Second}), worker.ProviderOpenAI),
		Logger: quiet, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(sctx))
	})

	// A gateway call to each replica at once: each waits for its job's
	// end, which the worker announces to every replica's listener.
	ids := make([]string, 2)
	var wg sync.WaitGroup
	for i, r := range []replicaBundle{a, b} {
		wg.Go(func() {
			cfg := openai.DefaultConfig(keyAcme)
			cfg.BaseURL = r.srv.URL + "/v1"
			cfg.HTTPClient = &http.Client{Timeout: 30 * time.Second}
			resp, err := openai.NewClientWithConfig(cfg).CreateChatCompletion(ctx, chatRequest("gpt-4o-mini", "what is a replica?"))
			if !assertNoError(t, err) {
				return
			}
			ids[i] = resp.Header().Get("X-Llmq-Job-Id")
		})
	}
	wg.Wait()
	for i, id := range ids {
		require.NotEmpty(t, id, "replica %d", i)
		// Read from the other replica.
		job := []replicaBundle{b, a}[i].get(t, keyAcme, "/v1/jobs/"+id).json(t)
		require.Equal(t, "succeeded", job["status"])
	}

	// The deadline predictions are the lanes' in Postgres: a lane of
	// gpt-4o whose calls take 150 s refuses a 60 s call alike at either
	// replica, with the same prediction.
	slow := store.LaneRate{Model: "gpt-4o", RequestsPerMin: 0.4, Concurrency: 3, Latency: 150 * time.Second}
	var messages []string
	for _, r := range []replicaBundle{a, b} {
		require.NoError(t, st.LaneRates().SetLaneRates(ctx, "stuck", []store.LaneRate{slow}))
		resp := postGateway(t, r.testBundle, keyInitech, http.Header{"X-Stainless-Timeout": {"60"}}, `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`)
		require.Equal(t, http.StatusTooManyRequests, resp.status)
		e := resp.json(t)["error"].(map[string]any)
		require.Equal(t, api.CodeDeadlineUnmeetable, e["code"])
		require.NotEmpty(t, resp.header.Get("Retry-After"))
		messages = append(messages, e["message"].(string))
	}
	require.Equal(t, messages[0], messages[1])

	// The key limits are shared: 4 a minute at a and b together (acme's
	// key made its 4 above, 2 at each). b refuses once it has heard of
	// a's 4 posts of globex's key (two exchanges of a's after the posts,
	// then two of b's: one that began after a's write ended).
	for i := range 4 {
		require.Equal(t, http.StatusAccepted, a.post(t, keyGlobex, jobJSON("")).status, "post %d at a", i)
	}
	exchanged := func(r replicaBundle) float64 {
		return metricValue(t, r.reg, "llmq_api_limit_exchanges_total", map[string]string{"outcome": "ok"})
	}
	after := func(r replicaBundle) {
		n := exchanged(r)
		require.Eventually(t, func() bool { return exchanged(r) >= n+2 }, 10*time.Second, 5*time.Millisecond)
	}
	after(a)
	after(b)
	refused := b.post(t, keyGlobex, jobJSON(""))
	require.Equal(t, http.StatusTooManyRequests, refused.status, "the key's 5th request, at b")
	require.Equal(t, api.CodeRateLimited, refused.json(t)["error"].(map[string]any)["code"])
	require.NotEmpty(t, refused.header.Get("Retry-After"))

	// The tenant's 6 a minute: globex's other key made 2 at b after the
	// tenant's 4 at a, which b heard of already (the exchanges above), so
	// a 3rd is refused at b, and at a once a heard of b's 2.
	for i := range 2 {
		require.Equal(t, http.StatusAccepted, b.post(t, keyGlobex2, jobJSON("")).status, "post %d at b", i)
	}
	after(b)
	after(a)
	require.Equal(t, http.StatusTooManyRequests, a.post(t, keyGlobex2, jobJSON("")).status, "the tenant's 7th request, at a")
	require.Equal(t, http.StatusTooManyRequests, b.post(t, keyGlobex2, jobJSON("")).status, "the tenant's 7th request, at b")

	// A replica without the ledger limits alone: the key's limit again at
	// it, past what a and b let through.
	c := replica(nil)
	for i := range 4 {
		require.Equal(t, http.StatusAccepted, c.post(t, keyGlobex, jobJSON("")).status, "post %d at c", i)
	}
}

// postGateway posts body to b's POST /v1/chat/completions with header.
func postGateway(t *testing.T, b *testBundle, key string, header http.Header, body string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.srv.URL+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header = header.Clone()
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

// assertNoError is require.NoError for a goroutine other than the test's.
func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}
