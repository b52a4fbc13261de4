package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/batchapi"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

const (
	keyAcme   = "key-acme"
	keyGlobex = "key-globex"
	keyOps    = "key-operator"
)

type testBundle struct {
	clock    *clockwork.FakeClock
	letters  *dlq.Writer
	store    *store.Store
	broker   *memory.Broker
	sub      *memory.Subscriber
	producer *producer.Producer
	api      *api.API
	srv      *httptest.Server
	registry *prometheus.Registry
	// batches is the batch lane's configuration, on a simulator of the
	// test's own (options.batches).
	batches batchapi.Config
}

type options struct {
	producer func(*producer.Config)
	api      func(*api.Config)
	// apiStore, when set, changes the API's configuration with its store
	// at hand (after api).
	apiStore func(*api.Config, *store.Store)
	// batches starts a simulator for the provider batches of the test
	// (see testBundle.batch) and lets the API cancel them there.
	batches bool
}

func setup(t *testing.T, o options) *testBundle {
	t.Helper()
	clk := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	st := store.New(storetest.NewPool(t), store.WithClock(clk))
	b := memory.New()
	sub, err := b.NewSubscriber("jobs", memory.Config{Prefetch: 1000})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	reg := prometheus.NewRegistry()
	pcfg := producer.Config{
		Publisher: b.NewPublisher(), Store: st.Outbox(), Destination: "jobs", DepthProbe: sub,
		DepthTTL: -1, Clock: clk, Logger: quiet, Registerer: reg,
	}
	if o.producer != nil {
		o.producer(&pcfg)
	}
	p, err := producer.New(pcfg)
	require.NoError(t, err)
	dcfg := dlq.Config{Store: st.DeadLetters(), Publisher: b.NewPublisher(), Destination: "jobs", Clock: clk, Logger: quiet}
	svc, err := dlq.NewService(dcfg)
	require.NoError(t, err)
	letters, err := dlq.NewWriter(dcfg)
	require.NoError(t, err)
	acfg := api.Config{
		Producer: p, Store: st.Jobs(), Keys: map[string]string{keyAcme: "acme", keyGlobex: "globex"}, OperatorKeys: []api.OperatorKey{{Name: "ops", Key: keyOps}},
		DeadLetterService: svc, Batches: st.Batches(), Notifications: st.Notifications(),
		Usage: st.Budgets(), Tenants: testTenants, Logger: quiet, Registerer: reg, Clock: clk,
	}
	var bcfg batchapi.Config
	if o.batches {
		sim := upstreamsim.NewTestServer(t, upstreamsim.Config{Seed: 1}, upstreamsim.WithLogger(quiet))
		cc := sim.ClientConfig("sk-test")
		tr := &http.Transport{}
		t.Cleanup(tr.CloseIdleConnections)
		cc.HTTPClient = &http.Client{Timeout: 30 * time.Second, Transport: tr}
		client := openai.NewClientWithConfig(cc)
		// A live lane that drains in an hour sends deferrable jobs to the
		// Batch API at once.
		bcfg = batchapi.Config{Store: st.Batches(), Client: client, Logger: quiet, Clock: clk,
			DrainThreshold: time.Minute, Drain: func() time.Duration { return time.Hour }}
		acfg.CancelBatch = func(ctx context.Context, ref string) (*store.BatchRecord, error) {
			return batchapi.Cancel(ctx, st.Batches(), client, ref)
		}
	}
	if o.api != nil {
		o.api(&acfg)
	}
	if o.apiStore != nil {
		o.apiStore(&acfg, st)
	}
	a, err := api.New(acfg)
	require.NoError(t, err)
	if acfg.JobsDone != nil {
		require.NoError(t, a.Start(context.Background()))
		t.Cleanup(func() { require.NoError(t, a.Stop(context.Background())) })
	}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	return &testBundle{clock: clk, letters: letters, store: st, broker: b, sub: sub, producer: p, api: a, srv: srv, registry: reg,
		batches: bcfg}
}

// batch puts the queued jobs ids into one provider batch at the simulator,
// as the batch lane does with deferrable jobs (the jobs are made
// deferrable, its collector takes and submits them), and returns the
// batch's llmq id.
func (b *testBundle) batch(t *testing.T, ids ...string) string {
	t.Helper()
	ctx := context.Background()
	_, err := b.store.Pool().Exec(ctx, `UPDATE jobs SET "deferrable" = true WHERE id = ANY($1)`, ids)
	require.NoError(t, err)
	c, err := batchapi.NewCollector(b.batches)
	require.NoError(t, err)
	n, err := c.FlushAll(ctx)
	require.NoError(t, err)
	require.Equal(t, len(ids), n)
	open, err := b.store.Batches().ListBatches(ctx, 1, true)
	require.NoError(t, err)
	require.Len(t, open, 1)
	return open[0].ID
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.body, &m), "body: %s", r.body)
	return m
}

// apiError returns the error object of an error response.
func (r response) apiError(t *testing.T) api.Error {
	t.Helper()
	var e struct {
		Error api.Error `json:"error"`
	}
	require.NoError(t, json.Unmarshal(r.body, &e), "body: %s", r.body)
	return e.Error
}

func (b *testBundle) do(t *testing.T, method, path, key, contentType string, body []byte) response {
	t.Helper()
	req, err := http.NewRequest(method, b.srv.URL+path, bytes.NewReader(body))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := b.srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

func (b *testBundle) post(t *testing.T, key, body string) response {
	t.Helper()
	return b.do(t, http.MethodPost, "/v1/jobs", key, "application/json", []byte(body))
}

func (b *testBundle) get(t *testing.T, key, path string) response {
	t.Helper()
	return b.do(t, http.MethodGet, path, key, "", nil)
}

const validBody = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`

func jobJSON(id string) string {
	if id == "" {
		return `{"body":` + validBody + `}`
	}
	return `{"id":"` + id + `","body":` + validBody + `}`
}

func TestEnqueueAndPoll(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	r := b.post(t, keyAcme, `{"priority":"high","metadata":{"k":"v"},"body":`+validBody+`}`)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	m := r.json(t)
	id := m["id"].(string)
	require.Equal(t, map[string]any{"id": id, "tenant": "acme", "status": "queued", "created": true, "published": true,
		"queue_depth": 0.0, "queue_soft_share": 5000.0, "queue_hard_share": 50000.0, "estimated_wait_seconds": 0.0,
		"backpressure": "ok"}, m, "acme's own figures: alone, it may hold half of the queue")
	require.Equal(t, "/v1/jobs/"+id, r.header.Get("Location"))

	r = b.get(t, keyAcme, "/v1/jobs/"+id)
	require.Equal(t, http.StatusOK, r.status)
	job := r.json(t)
	require.Equal(t, "queued", job["status"])
	require.Equal(t, "high", job["priority"])
	require.Equal(t, "gpt-4o-mini", job["model"])
	require.Equal(t, map[string]any{"k": "v"}, job["metadata"])

	msgs, err := b.sub.Consume(context.Background())
	require.NoError(t, err)
	msg := receive(t, msgs)
	require.Equal(t, id, string(msg.Key), "Kafka messages are keyed by job id")
	require.Equal(t, uint8(9), msg.Priority)

	// Re-posting the same id is idempotent.
	r = b.post(t, keyAcme, `{"id":"`+id+`","body":`+validBody+`}`)
	require.Equal(t, http.StatusAccepted, r.status)
	require.Equal(t, false, r.json(t)["created"])
	require.Equal(t, int64(1), b.broker.Depth("jobs"))

	// A worker claims it: it says what it does, and how many calls it took.
	l := b.claim(t, id)
	job = b.get(t, keyAcme, "/v1/jobs/"+id).json(t)
	require.Equal(t, "running", job["status"])
	require.Equal(t, store.PhaseWaitingForQuota, job["phase"])
	require.NotContains(t, job, "waiting_reason")
	_, err = b.store.Queue().MarkCalling(context.Background(), l, store.PolicyState{})
	require.NoError(t, err)
	job = b.get(t, keyAcme, "/v1/jobs/"+id).json(t)
	require.Equal(t, store.PhaseCalling, job["phase"])
	require.Equal(t, 1.0, job["attempts"])

	// The result is served once stored.
	_, err = b.store.Queue().StoreResult(context.Background(), l.Key, store.Result{
		Response:  json.RawMessage(`{"id":"chatcmpl-1","choices":[{"message":{"role":"assistant","content":"hello"}}]}`),
		UsedModel: "gpt-4o-mini", PromptTokens: 3, CompletionTokens: 1})
	require.NoError(t, err)
	job = b.get(t, keyAcme, "/v1/jobs/"+id).json(t)
	require.Equal(t, "succeeded", job["status"])
	require.Equal(t, "chatcmpl-1", job["result"].(map[string]any)["id"])
	require.Equal(t, map[string]any{"prompt_tokens": 3.0, "completion_tokens": 1.0}, job["usage"])
	require.NotContains(t, job, "phase")
	require.NoError(t, msg.Ack(context.Background()))
}

// claim claims the one queued job id as a worker would and returns its
// lease.
func (b *testBundle) claim(t *testing.T, id string) store.Lease {
	t.Helper()
	recs, err := b.store.Queue().Claim(context.Background(), store.ClaimRequest{Model: "gpt-4o-mini", Owner: "w", Lease: time.Minute, Limit: 1})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, id, recs[0].ID)
	return recs[0].Lease()
}

func receive(t *testing.T, msgs <-chan *transport.Message) *transport.Message {
	t.Helper()
	select {
	case m := <-msgs:
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("no message within 5s")
		return nil
	}
}

func TestBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	require.Equal(t, http.StatusAccepted, b.post(t, keyGlobex, jobJSON("taken")).status)
	r := b.post(t, keyAcme, `{"jobs":[`+jobJSON("b1")+`,`+jobJSON("taken")+`,`+jobJSON("")+`]}`)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	var out struct {
		Jobs []struct {
			ID, Tenant, Status string
			Created, Published bool
		}
		QueueDepth int64 `json:"queue_depth"`
	}
	require.NoError(t, json.Unmarshal(r.body, &out))
	require.Len(t, out.Jobs, 3)
	require.Equal(t, "b1", out.Jobs[0].ID)
	require.True(t, out.Jobs[0].Published)
	// Ids are scoped by tenant: globex's "taken" is not acme's.
	require.Equal(t, "taken", out.Jobs[1].ID)
	require.Equal(t, "acme", out.Jobs[1].Tenant)
	require.True(t, out.Jobs[1].Created)
	require.NotEmpty(t, out.Jobs[2].ID)
	require.Equal(t, int64(0), out.QueueDepth, "acme's own depth, measured before the batch: globex's job is not counted")
	require.Equal(t, int64(4), b.broker.Depth("jobs"))

	// A single job whose id another tenant holds too: the tenant's own.
	r = b.post(t, keyAcme, jobJSON("taken"))
	require.Equal(t, http.StatusAccepted, r.status)
	require.Equal(t, false, r.json(t)["created"])

	// 1000 jobs are accepted in one request.
	var sb strings.Builder
	sb.WriteString(`{"jobs":[`)
	for i := 0; i < api.MaxBatch; i++ {
		if i > 0 {
			sb.WriteString(",")
		}
		sb.WriteString(jobJSON(fmt.Sprintf("big-%d", i)))
	}
	sb.WriteString("]}")
	r = b.post(t, keyAcme, sb.String())
	require.Equal(t, http.StatusAccepted, r.status)
	require.Equal(t, int64(1004), b.broker.Depth("jobs"))
}

func TestAuthAndTenantIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	r := b.post(t, keyAcme, jobJSON("acme-1"))
	require.Equal(t, http.StatusAccepted, r.status)

	for _, tc := range []struct{ name, auth string }{
		{"none", ""}, {"unknown key", "Bearer nope"}, {"basic", "Basic a2V5LWFjbWU6"}, {"empty bearer", "Bearer "},
		{"key without scheme", keyAcme},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, req := range []struct{ method, path string }{
				{"POST", "/v1/jobs"}, {"GET", "/v1/jobs"}, {"GET", "/v1/jobs/acme-1"}, {"DELETE", "/v1/jobs/acme-1"}, {"GET", "/v1/queue"},
			} {
				hr, err := http.NewRequest(req.method, b.srv.URL+req.path, strings.NewReader(jobJSON("")))
				require.NoError(t, err)
				hr.Header.Set("Content-Type", "application/json")
				if tc.auth != "" {
					hr.Header.Set("Authorization", tc.auth)
				}
				resp, err := b.srv.Client().Do(hr)
				require.NoError(t, err)
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s %s", req.method, req.path)
				require.Equal(t, `Bearer realm="llmq"`, resp.Header.Get("WWW-Authenticate"))
				require.Contains(t, string(body), `"code":"unauthorized"`)
			}
		})
	}
	// Nothing was enqueued or cancelled by the refused requests.
	require.Equal(t, int64(1), b.broker.Depth("jobs"))

	// globex cannot see, list or cancel acme's job: 404 as if missing.
	r = b.get(t, keyGlobex, "/v1/jobs/acme-1")
	require.Equal(t, http.StatusNotFound, r.status)
	require.Equal(t, api.Error{Code: api.CodeNotFound, Field: "id", Message: `no job "acme-1"`}, r.apiError(t))
	require.Equal(t, r.body, b.get(t, keyGlobex, "/v1/jobs/acme-1").body)
	missing := b.get(t, keyGlobex, "/v1/jobs/never-existed")
	require.Equal(t, http.StatusNotFound, missing.status)
	r = b.do(t, http.MethodDelete, "/v1/jobs/acme-1", keyGlobex, "", nil)
	require.Equal(t, http.StatusNotFound, r.status)
	list := b.get(t, keyGlobex, "/v1/jobs").json(t)
	require.Equal(t, []any{}, list["data"])
	require.Equal(t, "queued", b.get(t, keyAcme, "/v1/jobs/acme-1").json(t)["status"])

	// The tenant of a posted job is the key's.
	r = b.post(t, keyGlobex, `{"tenant":"acme","body":`+validBody+`}`)
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Equal(t, "tenant", r.apiError(t).Field)
	require.Equal(t, api.CodeTenantMismatch, r.apiError(t).Code)
	r = b.post(t, keyGlobex, `{"tenant":"globex","body":`+validBody+`}`)
	require.Equal(t, http.StatusAccepted, r.status)
	require.Equal(t, "globex", r.json(t)["tenant"])

	// Unauthenticated endpoints.
	require.Equal(t, http.StatusOK, b.get(t, "", "/healthz").status)
	require.Equal(t, http.StatusOK, b.get(t, "", "/readyz").status)
	require.Equal(t, http.StatusOK, b.get(t, "", "/openapi.yaml").status)
	require.Equal(t, http.StatusNotFound, b.get(t, "", "/metrics").status, "metrics have a listener of their own")
	require.Equal(t, 5.0, series(t, b.registry, "llmq_api_requests_total", "401", "POST /v1/jobs"))
}

func TestCancelAndList(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	for i := 0; i < 5; i++ {
		require.Equal(t, http.StatusAccepted, b.post(t, keyAcme, jobJSON(fmt.Sprintf("j%d", i))).status)
		b.clock.Advance(time.Second)
	}
	r := b.do(t, http.MethodDelete, "/v1/jobs/j0", keyAcme, "", nil)
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, "cancelled", r.json(t)["status"])
	r = b.do(t, http.MethodDelete, "/v1/jobs/j0", keyAcme, "", nil)
	require.Equal(t, http.StatusConflict, r.status)
	require.Equal(t, api.CodeNotCancellable, r.apiError(t).Code)

	b.claim(t, "j1")
	r = b.do(t, http.MethodDelete, "/v1/jobs/j1", keyAcme, "", nil)
	require.Equal(t, http.StatusConflict, r.status)
	require.Equal(t, api.Error{Code: api.CodeNotCancellable,
		Message: `job "j1" is running: only a job that has not started can be cancelled`}, r.apiError(t))

	// Paging: newest first, two per page.
	var ids []string
	next := ""
	for page := 0; ; page++ {
		path := "/v1/jobs?limit=2"
		if next != "" {
			path += "&after=" + next
		}
		var out struct {
			Jobs []struct {
				ID string `json:"id"`
			} `json:"data"`
			NextCursor *string `json:"next_cursor"`
		}
		r := b.get(t, keyAcme, path)
		require.Equal(t, http.StatusOK, r.status)
		require.NoError(t, json.Unmarshal(r.body, &out))
		for _, j := range out.Jobs {
			ids = append(ids, j.ID)
		}
		if out.NextCursor == nil {
			break
		}
		next = *out.NextCursor
		require.Less(t, page, 5)
	}
	require.Equal(t, []string{"j4", "j3", "j2", "j1", "j0"}, ids)

	var out struct {
		Jobs []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(b.get(t, keyAcme, "/v1/jobs?status=cancelled").body, &out))
	require.Len(t, out.Jobs, 1)
	require.Equal(t, "j0", out.Jobs[0].ID)
}

func TestBackpressureHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t, options{producer: func(c *producer.Config) {
		c.SoftDepth, c.HardDepth, c.RateWindow = 2, 4, time.Minute
		// acme may hold the whole queue: the queue's own limits bind.
		c.Tenants = llmq.Tenants{"acme": {Scope: llmq.Scope{SoftDepth: 2, HardDepth: 100}}}
	}})
	ctx := context.Background()
	// 12 jobs finished in the last minute: 12/min, one every 5 s.
	for i := 0; i < 12; i++ {
		j := &llmq.Job{ID: fmt.Sprintf("done-%d", i), Tenant: "acme", Priority: llmq.PriorityNormal, Body: json.RawMessage(validBody)}
		require.NoError(t, j.Validate())
		_, err := b.store.Jobs().Insert(ctx, j)
		require.NoError(t, err)
		_, err = b.store.Queue().StoreResult(ctx, store.Key{Tenant: "acme", ID: j.ID}, store.Result{Response: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	states := []string{"ok", "ok", "throttled", "throttled"}
	for i, want := range states {
		r := b.post(t, keyAcme, jobJSON(fmt.Sprintf("j%d", i)))
		require.Equal(t, http.StatusAccepted, r.status)
		require.Equal(t, want, r.json(t)["backpressure"], "job %d", i)
		require.Equal(t, want, r.header.Get("X-Llmq-Backpressure"))
		require.Equal(t, float64(i*5), r.json(t)["estimated_wait_seconds"])
	}
	q := b.get(t, keyAcme, "/v1/queue")
	require.Equal(t, http.StatusOK, q.status)
	require.Equal(t, map[string]any{"tenant": "acme", "depth": 4.0, "lag": 0.0, "queued": 4.0, "in_flight": 0.0,
		"completion_rate_per_min": 12.0, "estimated_drain_seconds": 20.0, "state": "rejecting", "measured_at": "2026-11-30T12:00:00Z",
		"weight": 1.0, "soft_share": 2.0, "hard_share": 100.0}, q.json(t), "acme's own part; the queue's hard depth rejects")

	r := b.post(t, keyAcme, jobJSON("refused"))
	require.Equal(t, http.StatusTooManyRequests, r.status)
	require.Equal(t, "10", r.header.Get("Retry-After"), "(4 - soft 2) jobs at 12/min")
	require.Equal(t, api.CodeQueueFull, r.apiError(t).Code)
	require.Equal(t, http.StatusNotFound, b.get(t, keyAcme, "/v1/jobs/refused").status)

	// Workers ingest and finish jobs (finished before the rate window, so
	// the rate stays 12/min): the broker's message acked, the job ended.
	msgs, err := b.sub.Consume(ctx)
	require.NoError(t, err)
	drain := func(ids ...string) {
		for range ids {
			require.NoError(t, receive(t, msgs).Ack(ctx))
		}
		_, err := b.store.Pool().Exec(ctx, `UPDATE jobs SET status = 'succeeded', finished_at = $1 WHERE id = ANY($2)`,
			b.clock.Now().Add(-time.Hour), ids)
		require.NoError(t, err)
	}
	// Drain two: throttled, and a deadline 5 s away cannot be met (10 s wait).
	drain("j0", "j1")
	deadline := b.clock.Now().Add(5 * time.Second).Format(time.RFC3339)
	r = b.post(t, keyAcme, `{"jobs":[`+jobJSON("ok1")+`,{"id":"urgent","deadline":"`+deadline+`","body":`+validBody+`}]}`)
	require.Equal(t, http.StatusTooManyRequests, r.status, "%s", r.body)
	require.Equal(t, "5", r.header.Get("Retry-After"))
	require.Equal(t, api.CodeDeadlineUnreachable, r.apiError(t).Code)
	require.Equal(t, "jobs[1].deadline", r.apiError(t).Field)
	later := b.clock.Now().Add(time.Minute).Format(time.RFC3339)
	r = b.post(t, keyAcme, `{"id":"relaxed","deadline":"`+later+`","body":`+validBody+`}`)
	require.Equal(t, http.StatusAccepted, r.status)

	// Drain everything: ok again.
	drain("j2", "j3", "relaxed")
	require.Equal(t, "ok", b.get(t, keyAcme, "/v1/queue").json(t)["state"])
	require.Equal(t, http.StatusAccepted, b.post(t, keyAcme, jobJSON("after")).status)
}

// TestModelAllowlist: a job that names a model the catalog does not list
// is refused with 400 naming the field; nothing is recorded.
func TestModelAllowlist(t *testing.T) {
	t.Parallel()
	b := setup(t, options{api: func(c *api.Config) {
		c.Catalog = llmq.Catalog{Models: map[string]llmq.Model{"gpt-4o-mini": {Fallbacks: []string{"gpt-4.1-mini"}}}}
	}})
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for body, field := range map[string]string{
		`{"body":{"model":"o3-pro",` + msgs + `}}`:                                       "body.model",
		`{"fallback_models":["<!channel>"],"body":{"model":"gpt-4o-mini",` + msgs + `}}`: "fallback_models[0]",
		`{"jobs":[` + jobJSON("ok") + `,{"body":{"model":"x",` + msgs + `}}]}`:           "jobs[1].body.model",
	} {
		r := b.post(t, keyAcme, body)
		require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
		e := r.apiError(t)
		require.Equal(t, llmq.CodeModelNotAllowed, e.Code)
		require.Equal(t, field, e.Field)
		require.Contains(t, e.Message, "allowed: gpt-4.1-mini, gpt-4o-mini")
	}
	require.Equal(t, int64(0), b.broker.Depth("jobs"))
	require.Equal(t, http.StatusAccepted, b.post(t, keyAcme, `{"fallback_models":["gpt-4.1-mini"],"body":`+validBody+`}`).status)
}

// TestUnknownProject: a job naming a project its tenant does not list (acme
// lists support) is refused with 400 naming the field, and nothing is
// recorded; a listed project, none, a tenant that lists no project and a
// tenant that allows unknown projects are taken.
func TestUnknownProject(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	for body, field := range map[string]string{
		`{"id":"u1","project":"other","body":` + validBody + `}`:                                  "project",
		`{"jobs":[` + jobJSON("u2") + `,{"id":"u3","project":"other","body":` + validBody + `}]}`: "jobs[1].project",
	} {
		r := b.post(t, keyAcme, body)
		require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
		msg := `tenant "acme" has no project "other"; its projects: support`
		require.Equal(t, api.Error{Code: llmq.CodeUnknownProject, Field: field, Message: msg,
			Details: []llmq.FieldError{{Field: field, Code: llmq.CodeUnknownProject, Message: msg}}}, r.apiError(t))
	}
	require.Equal(t, int64(0), b.broker.Depth("jobs"))
	for _, id := range []string{"u1", "u2", "u3"} {
		_, err := b.store.Jobs().Get(context.Background(), "acme", id)
		require.ErrorIs(t, err, store.ErrNotFound, id)
	}
	require.Equal(t, http.StatusAccepted, b.post(t, keyAcme, `{"project":"support","body":`+validBody+`}`).status)
	require.Equal(t, http.StatusAccepted, b.post(t, keyAcme, `{"body":`+validBody+`}`).status)
	require.Equal(t, http.StatusAccepted, b.post(t, keyGlobex, `{"project":"other","body":`+validBody+`}`).status)

	loose := setup(t, options{api: func(c *api.Config) {
		c.Tenants = llmq.Tenants{"acme": {Projects: map[string]llmq.Scope{"support": {}}, AllowUnknownProjects: true}}
	}})
	require.Equal(t, http.StatusAccepted, loose.post(t, keyAcme, `{"project":"other","body":`+validBody+`}`).status)
}

// zeros is an endless {"jobs":[0,0,0,... body that counts what was read.
type zeros struct{ read int }

func (z *zeros) Read(p []byte) (int, error) {
	for i := range p {
		switch {
		case z.read+i < len(`{"jobs":[`):
			p[i] = `{"jobs":[`[z.read+i]
		case (z.read+i-len(`{"jobs":[`))%2 == 0:
			p[i] = '0'
		default:
			p[i] = ','
		}
	}
	z.read += len(p)
	return len(p), nil
}

// TestBatchReadStopsAtTheLimit: the API stops reading a jobs array at the
// 1,001st element, and any value at the size of a job, instead of holding
// the whole body.
func TestBatchReadStopsAtTheLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	z := &zeros{}
	req := httptest.NewRequest(http.MethodPost, "/v1/jobs", z)
	req.Header.Set("Authorization", "Bearer "+keyAcme)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	b.api.ServeHTTP(rec, req)
	require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), `"code":"too_many_jobs"`)
	require.Less(t, z.read, 64<<10, "read %d bytes of an endless body", z.read)

	// One element, or one field of a single job, larger than a job may be.
	small := setup(t, options{api: func(c *api.Config) { c.MaxMessageBytes = 4 << 10 }})
	big := `{"body":{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 200<<10) + `"}]}}`
	for body, field := range map[string]string{`{"jobs":[` + jobJSON("") + `,` + big + `]}`: "jobs[1]", big: ""} {
		r := small.post(t, keyAcme, body)
		require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
		require.Equal(t, llmq.CodeTooLarge, r.apiError(t).Code)
		require.Equal(t, field, r.apiError(t).Field)
	}
}

// series returns the value of the counter of family name whose labels
// are code and route.
func series(t *testing.T, reg *prometheus.Registry, name, code, route string) float64 {
	t.Helper()
	return metricValue(t, reg, name, map[string]string{"code": code, "route": route})
}

// metricValue returns the value of the counter or gauge of family name
// whose labels include want.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			match := true
			for k, v := range want {
				match = match && labels[k] == v
			}
			if !match {
				continue
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s%v", name, want)
	return 0
}

// downAfterInsert is the producer's store with the database gone the
// moment the outbox rows are committed: every later call fails.
type downAfterInsert struct {
	producer.Store
	inserted atomic.Bool
}

func (d *downAfterInsert) InsertOutboxPublishing(ctx context.Context, jobs []store.NewJob,
	publish func([]store.Recorded) error) ([]store.Recorded, error) {
	defer d.inserted.Store(true)
	return d.Store.InsertOutboxPublishing(ctx, jobs, publish)
}

func (d *downAfterInsert) MarkPublished(ctx context.Context, keys []store.Key) error {
	if d.inserted.Load() {
		return errors.New("database down")
	}
	return d.Store.MarkPublished(ctx, keys)
}

// TestAcceptedOnceCommitted: once the outbox rows are committed the jobs
// are accepted (202), even when the database goes away right after, and a
// job that existed answers with its status: nothing is read after the
// commit, so no 503 "nothing was recorded" can follow it.
func TestAcceptedOnceCommitted(t *testing.T) {
	t.Parallel()
	var down *downAfterInsert
	b := setup(t, options{producer: func(c *producer.Config) {
		down = &downAfterInsert{Store: c.Store}
		c.Store = down
	}})
	require.Equal(t, http.StatusAccepted, b.post(t, keyAcme, jobJSON("old")).status)
	down.inserted.Store(false)
	r := b.post(t, keyAcme, `{"jobs":[`+jobJSON("old")+`,`+jobJSON("new")+`]}`)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	var out struct {
		Jobs []struct {
			ID, Status         string
			Created, Published bool
		}
	}
	require.NoError(t, json.Unmarshal(r.body, &out))
	require.Len(t, out.Jobs, 2)
	require.Equal(t, "queued", out.Jobs[0].Status)
	require.False(t, out.Jobs[0].Created)
	require.True(t, out.Jobs[1].Created)
	require.True(t, out.Jobs[1].Published, "confirmed by the broker before the commit")
}
