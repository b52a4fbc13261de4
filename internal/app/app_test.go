package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/app"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
	"github.com/llmq/llmq/worker"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"))
}

var quiet = slog.New(slog.DiscardHandler)

// settings is a configuration on a database, an in-memory broker and a
// simulator of the test's own.
func settings(t *testing.T) *config.Config {
	t.Helper()
	sim := upstreamsim.NewTestServer(t, upstreamsim.Config{Seed: 1})
	broker, err := config.ParseBroker("memory://app-" + uuid.NewString()[:8] + "/jobs")
	require.NoError(t, err)
	return &config.Config{
		DatabaseURL: storetest.NewDB(t), Broker: broker, OpenAIBaseURL: sim.URL, OpenAIAPIKey: "sk-test",
		APIKeys: map[string]string{"key-acme": "acme"},
	}
}

// TestWorkerAndAPI runs a worker and the API in one App: a job posted to
// the API is recorded with its estimate and size delay (as the worker's
// ingest records one) and succeeds through the worker; Stop stops
// everything, twice.
func TestWorkerAndAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := settings(t)
	s.Models = map[string]llmq.Model{"gpt-4o-mini": {TPM: 60000}}
	a, err := app.New(ctx, app.Config{
		Settings: s, Migrate: true, Logger: quiet, MetricsListen: "127.0.0.1:0",
		Worker: &app.WorkerConfig{}, API: &app.APIConfig{Listen: "127.0.0.1:0"},
	})
	require.NoError(t, err)
	require.NoError(t, a.Start(ctx))
	base := "http://" + a.APIAddr().String()

	do := func(method, path, body string) (int, map[string]any) {
		req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer key-acme")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var out map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		return resp.StatusCode, out
	}
	code, _ := do(http.MethodPost, "/v1/jobs",
		`{"id":"app-1","body":{"model":"gpt-4o-mini","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}}`)
	require.Equal(t, http.StatusAccepted, code)
	require.Eventually(t, func() bool {
		_, job := do(http.MethodGet, "/v1/jobs/app-1", "")
		return job["status"] == string(llmq.StatusSucceeded)
	}, 30*time.Second, 20*time.Millisecond)
	rec, err := a.Store().Jobs().Get(ctx, "acme", "app-1")
	require.NoError(t, err)
	require.Positive(t, rec.EstPromptTokens)
	require.Equal(t, 8, rec.EstOutputTokens)
	// A normal job: one aging step, then fifty times its tokens' time at
	// 60,000 TPM (50 ms a token).
	tokens := rec.EstPromptTokens + rec.EstOutputTokens
	require.Equal(t, store.AgingStepDefault+time.Duration(tokens)*50*time.Millisecond, rec.SchedKey.Sub(rec.CreatedAt))
	code, _ = do(http.MethodGet, "/v1/dead-letters", "")
	require.Equal(t, http.StatusOK, code, "the API mounts the dead-letter endpoints")

	mfs, err := a.Registry().Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"llmq_upstream_requests_total", "llmq_api_requests_total", "llmq_dlq_letters_recorded_total", "go_goroutines"} {
		require.True(t, names[n], "one registry holds every component's metrics: %s", n)
	}

	require.NoError(t, a.Stop(ctx))
	require.NoError(t, a.Stop(ctx), "a second Stop returns the first one's result")
	require.Error(t, a.Start(ctx), "no Start after Stop")
	require.Error(t, a.Store().Ping(ctx), "the store is closed")
	_, err = net.DialTimeout("tcp", a.APIAddr().String(), time.Second)
	require.Error(t, err, "the API listener is closed")
}

// TestRunStopsWithTheContext runs an App until its context ends.
func TestRunStopsWithTheContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, app.Config{Settings: settings(t), Logger: quiet, Worker: &app.WorkerConfig{}})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	require.Error(t, a.Store().Ping(context.Background()), "Run stopped the app")
}

// TestNewFailureClosesWhatItOpened fails New after the store, the broker
// and the API's listener are open (the worker's strategy is unknown): the
// listener it was handed is closed.
func TestNewFailureClosesWhatItOpened(t *testing.T) {
	t.Parallel()
	s := settings(t)
	s.Strategy = "bogus"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, err = app.New(context.Background(), app.Config{Settings: s, Logger: quiet,
		Worker: &app.WorkerConfig{}, API: &app.APIConfig{Listener: ln}})
	require.ErrorContains(t, err, `strategy: shaping: unknown strategy "bogus"`)
	_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second)) // fails when closed
	_, err = ln.Accept()
	require.True(t, errors.Is(err, net.ErrClosed), "listener closed: %v", err)
}

// TestMissingDatabase: a worker or an API on a database that does not
// exist stops with an error that says to run llmq migrate, and creates
// nothing (a typo in the name must not start a second queue); the demo,
// which asks for it, creates the database.
func TestMissingDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, _ := storetest.MissingDB(t)
	s := settings(t)
	s.DatabaseURL = url
	name := url[strings.LastIndex(url, "/")+1:]
	name, _, _ = strings.Cut(name, "?")
	for _, c := range []app.Config{
		{Settings: s, Migrate: true, Logger: quiet, Worker: &app.WorkerConfig{}},
		{Settings: s, Migrate: true, Logger: quiet, API: &app.APIConfig{Listen: "127.0.0.1:0"}},
	} {
		_, err := app.New(ctx, c)
		require.ErrorIs(t, err, store.ErrNoDatabase)
		require.EqualError(t, err, `database "`+name+`" does not exist: run llmq migrate`)
	}
	_, err := store.Open(ctx, url)
	require.ErrorIs(t, err, store.ErrNoDatabase, "nothing created the database")

	a, err := app.New(ctx, app.Config{Settings: s, Migrate: true, CreateDatabase: true, Logger: quiet, Worker: &app.WorkerConfig{}})
	require.NoError(t, err)
	require.NotEmpty(t, a.Migrated())
	require.NoError(t, a.Stop(ctx))
}

// TestWorkerChecksItsUpstream: a worker asks its upstream for its models at
// start-up. A key the upstream refuses stops it, naming the variable to
// set; an upstream that does not answer lets it start (it may come up
// later).
func TestWorkerChecksItsUpstream(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sim := upstreamsim.NewTestServer(t, upstreamsim.Config{Seed: 1, APIKeys: []string{"sk-right-key-0001"}})
	s := settings(t)
	s.OpenAIBaseURL, s.OpenAIAPIKey = sim.URL, "sk-wrong-key-0002"
	_, err := app.New(ctx, app.Config{Settings: s, Migrate: true, Logger: quiet, Worker: &app.WorkerConfig{}})
	require.ErrorIs(t, err, app.ErrUpstreamRefused)
	require.ErrorContains(t, err, "OPENAI_BASE_URL "+sim.URL+" refused the key sk-w… (401 invalid_api_key: Incorrect API key provided")
	require.ErrorContains(t, err, "set OPENAI_API_KEY or OPENAI_API_KEY_FILE to a key it accepts")
	require.NotContains(t, err.Error(), "sk-wrong-key-0002")

	s.OpenAIAPIKey = "sk-right-key-0001"
	a, err := app.New(ctx, app.Config{Settings: s, Migrate: true, Logger: quiet, Worker: &app.WorkerConfig{}})
	require.NoError(t, err)
	require.NoError(t, a.Stop(ctx))

	s.OpenAIBaseURL = "http://127.0.0.1:1/v1" // nothing listens
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, nil))
	a, err = app.New(ctx, app.Config{Settings: s, Migrate: true, Logger: log, Worker: &app.WorkerConfig{}})
	require.NoError(t, err, "an upstream that does not answer is a warning")
	require.NoError(t, a.Stop(ctx))
	require.Contains(t, logs.String(), `level=WARN msg="the upstream did not answer GET /models; starting anyway, jobs wait for it" upstream=http://127.0.0.1:1/v1`)

	// A model the provider does not list is a warning too.
	strict := upstreamsim.NewTestServer(t, upstreamsim.Config{Seed: 1, RestrictModels: true,
		Models: map[string]upstreamsim.ModelConfig{"gpt-4o-mini": {}}})
	s.OpenAIBaseURL = strict.URL
	// A database of its own: the first start imports the models, which
	// are the database's after it.
	s.DatabaseURL = storetest.NewDB(t)
	s.Models = map[string]llmq.Model{"gpt-4o-mini": {}, "gpt-4o-mnii": {}}
	logs.Reset()
	a, err = app.New(ctx, app.Config{Settings: s, Migrate: true, Logger: log, Worker: &app.WorkerConfig{}})
	require.NoError(t, err)
	require.NoError(t, a.Stop(ctx))
	require.Contains(t, logs.String(), `level=WARN msg="the upstream does not list a model of the configuration: its jobs will fail unless it serves it" upstream=`+strict.URL+" model=gpt-4o-mnii\n")
	require.NotContains(t, logs.String(), "model=gpt-4o-mini\n")
}

// TestGatewayRefusesItsOwnWorker: a worker whose upstream is an llmq API
// (OPENAI_BASE_URL exported for an SDK reaches the worker too) stops at
// start-up instead of turning each call into another job, and the gateway
// refuses any call that carries the worker's hop header.
func TestGatewayRefusesItsOwnWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := settings(t)
	gw, err := app.New(ctx, app.Config{Settings: s, Migrate: true, Logger: quiet, API: &app.APIConfig{Listen: "127.0.0.1:0"}})
	require.NoError(t, err)
	require.NoError(t, gw.Start(ctx))
	t.Cleanup(func() { require.NoError(t, gw.Stop(ctx)) })
	base := "http://" + gw.APIAddr().String() + "/v1"

	ws := *s
	ws.OpenAIBaseURL, ws.OpenAIAPIKey = base, "key-acme"
	_, err = app.New(ctx, app.Config{Settings: &ws, Logger: quiet, Worker: &app.WorkerConfig{}})
	require.ErrorIs(t, err, app.ErrUpstreamRefused)
	require.ErrorContains(t, err, "OPENAI_BASE_URL "+base+" is an llmq API, not a provider: the worker would make each of its calls another job")

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/chat/completions",
		strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer key-acme")
	req.Header.Set(worker.HeaderHop, "1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var body struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, "llmq_loop", body.Error.Code)
	n, err := gw.Store().Jobs().CountByStatus(ctx, "acme", 10)
	require.NoError(t, err)
	require.Empty(t, n, "no job was recorded")
}

// TestWorkerStartAndStopLines: the start line names the strategy in force
// (the default picks one per model), the stop line how many jobs went back
// to the queue.
func TestWorkerStartAndStopLines(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := settings(t)
	s.Models = map[string]llmq.Model{"gpt-4o-mini": {TPM: 60000}, "gpt-4.1-mini": {RPM: 60}, "local": {}}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, nil))
	a, err := app.New(ctx, app.Config{Settings: s, Migrate: true, Logger: log, Worker: &app.WorkerConfig{}})
	require.NoError(t, err)
	require.NoError(t, a.Start(ctx))
	require.NoError(t, a.Stop(ctx))
	out := logs.String()
	require.Contains(t, out, `msg="worker started" broker=memory/jobs strategy="shape for gpt-4.1-mini, gpt-4o-mini; adaptive for local"`)
	require.Contains(t, out, `msg="worker stopped: 0 jobs handed back to the queue" handed_back=0`)
}

// syncWriter serialises the writes of concurrent loggers.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
