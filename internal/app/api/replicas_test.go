package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
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
// took it; a job posted to one is read from the other. The rate limits are
// each replica's own: a key over its limit at one is still let in at the
// other, so behind N replicas a limit is set to the total / N.
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
	replica := func() *testBundle {
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
		p, err := producer.New(producer.Config{Publisher: pub, Store: st, Destination: queue, DepthProbe: probe, DepthTTL: -1,
			Logger: quiet, Registerer: prometheus.NewRegistry()})
		require.NoError(t, err)
		a, err := api.New(api.Config{Producer: p, Store: st, Keys: map[string]string{keyAcme: "acme", keyGlobex: "globex"},
			Catalog: gatewayCatalog, JobsDone: st, RateLimits: api.RateLimitConfig{KeyRPM: 3},
			Logger: quiet, Registerer: prometheus.NewRegistry()})
		require.NoError(t, err)
		require.NoError(t, a.Start(ctx))
		srv := httptest.NewServer(a)
		t.Cleanup(func() {
			srv.Close()
			require.NoError(t, a.Stop(context.Background()))
		})
		return &testBundle{srv: srv, api: a, store: st}
	}
	a, b := replica(), replica()

	st := store.New(first)
	sub, err := rabbitmq.NewSubscriber(rcfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	pub, err := rabbitmq.NewPublisher(rcfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	letters, err := dlq.NewWriter(dlq.Config{Store: st, Publisher: pub, Destination: queue})
	require.NoError(t, err)
	w, err := worker.New(worker.Config{Subscriber: sub, Store: st, DeadLetters: letters, Strategy: shaping.StrategyRetry,
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
	for i, r := range []*testBundle{a, b} {
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
		job := []*testBundle{b, a}[i].get(t, keyAcme, "/v1/jobs/"+id).json(t)
		require.Equal(t, "succeeded", job["status"])
	}

	// The key limits are each replica's: 3 a minute at a, 3 at b.
	for i := range 3 {
		require.Equal(t, http.StatusAccepted, a.post(t, keyGlobex, jobJSON("")).status, "post %d at a", i)
	}
	require.Equal(t, http.StatusTooManyRequests, a.post(t, keyGlobex, jobJSON("")).status)
	require.Equal(t, http.StatusAccepted, b.post(t, keyGlobex, jobJSON("")).status)
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
