package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/internal/tracing"
	"github.com/llmq/llmq/internal/tracing/tracingtest"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/kafka/kafkatest"
	"github.com/llmq/llmq/transport/open"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
	"github.com/llmq/llmq/worker"
)

var quiet = slog.New(slog.DiscardHandler)

const apiKey = "key-acme"

// pipeline is the API (gateway on), a producer, a broker, a worker and the
// simulator, with tracing exported to an in-process OTLP receiver. Model
// "broken" always answers 500; "backup" serves.
type pipeline struct {
	recv *tracingtest.Receiver
	srv  *httptest.Server
	st   *store.Store
	reg  *prometheus.Registry
	pub  transport.Publisher
	dest string
}

// options change setup's pipeline: the simulator's time to first token,
// the worker's tenants.
type options struct {
	ttft    time.Duration
	tenants llmq.Tenants
}

func setup(t *testing.T, brokerURL string, opts ...options) *pipeline {
	t.Helper()
	var o options
	if len(opts) > 0 {
		o = opts[0]
	}
	recv := tracingtest.NewReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
	shutdown, err := tracing.Setup(context.Background(), "llmq-test")
	require.NoError(t, err)
	require.True(t, tracing.Enabled())
	t.Cleanup(func() { require.NoError(t, shutdown(context.Background())) })

	ctx := context.Background()
	st := store.New(storetest.NewPool(t))
	sim := upstreamsim.NewTestServer(t, upstreamsim.Config{Seed: 5, Faults: upstreamsim.FaultConfig{
		Rates: map[upstreamsim.FaultKind]float64{upstreamsim.FaultServerError: 1}, Models: []string{"broken"}},
		Latency: upstreamsim.LatencyConfig{TTFT: o.ttft}},
		upstreamsim.WithLogger(quiet))
	target, err := open.Parse(brokerURL)
	require.NoError(t, err)
	pub, probe, err := open.Open(ctx, brokerURL, open.Options{Logger: quiet})
	require.NoError(t, err)
	_, sub, err := open.Open(ctx, brokerURL, open.Options{Prefetch: 8, Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { _, _, _ = sub.Close(), probe.Close(), pub.Close() })
	catalog := llmq.Catalog{Models: map[string]llmq.Model{"broken": {Fallbacks: []string{"backup"}}, "backup": {}}}
	p, err := producer.New(producer.Config{Publisher: pub, Store: st.Outbox(), Destination: target.Dest, DepthProbe: probe,
		DepthTTL: -1, Logger: quiet, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	a, err := api.New(api.Config{Producer: p, Store: st.Jobs(), Keys: map[string]string{apiKey: "acme"}, Catalog: catalog,
		JobsDone: st.Jobs(), Gateway: api.GatewayConfig{Timeout: 30 * time.Second}, Logger: quiet, Registerer: reg})
	require.NoError(t, err)
	require.NoError(t, a.Start(ctx))
	srv := httptest.NewServer(a)
	letters, err := dlq.NewWriter(dlq.Config{Store: st.DeadLetters(), Publisher: pub, Destination: target.Dest})
	require.NoError(t, err)
	w, err := worker.New(worker.Config{Subscriber: sub, Store: st.Queue(), DeadLetters: letters, Catalog: catalog,
		Strategy: shaping.StrategyRetry, MaxInFlight: 8,
		Upstream: worker.OpenAIUpstream(worker.NewOpenAIClient(worker.UpstreamConfig{BaseURL: sim.URL,
			APIKey: "sk-test", Timeout: 10 * time.Second}), worker.ProviderOpenAI),
		MaxAttempts: 4, FallbackAfter: 2, FallbackOn: []worker.FallbackTrigger{worker.FallbackOnServerError},
		Backoff: worker.Backoff{Base: 5 * time.Millisecond, Max: 20 * time.Millisecond},
		Tenants: o.tenants, Logger: quiet, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Close()
		require.NoError(t, w.Stop(sctx))
		require.NoError(t, a.Stop(sctx))
	})
	return &pipeline{recv: recv, srv: srv, st: st, reg: reg, pub: pub, dest: target.Dest}
}

// post sends body to path with a traceparent of trace id traceID.
func (pl *pipeline) post(t *testing.T, path, traceID, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, pl.srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// newTraceID is a random W3C trace id.
func newTraceID() string { return strings.ReplaceAll(uuid.NewString(), "-", "") }

// tree indexes a trace's spans.
type tree struct {
	t     *testing.T
	spans []tracingtest.Span
}

// one is the only span named name.
func (tr tree) one(name string) tracingtest.Span {
	all := tr.all(name)
	require.Len(tr.t, all, 1, "spans named %s", name)
	return all[0]
}

func (tr tree) all(name string) []tracingtest.Span {
	var out []tracingtest.Span
	for _, s := range tr.spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// finished waits for trace id's run span with a status and its server
// span (server).
func (pl *pipeline) finished(t *testing.T, id, server string) tree {
	t.Helper()
	spans := pl.recv.WaitFor(t, 60*time.Second, func(spans []tracingtest.Span) bool {
		ran, served := false, false
		for _, s := range spans {
			ran = ran || s.TraceID == id && s.Name == tracing.SpanRun && s.Attrs["llmq.job.status"] != ""
			served = served || s.TraceID == id && s.Name == server
		}
		return ran && served
	})
	var mine []tracingtest.Span
	for _, s := range spans {
		if s.TraceID == id {
			mine = append(mine, s)
		}
	}
	return tree{t: t, spans: mine}
}

// assertRun checks the worker's part of a trace under publish: the ingest,
// the wait in Postgres and the run, whose two calls to "broken" fail with
// 500, retried once, before the fallback to "backup" answers; then the
// result write.
func assertRun(t *testing.T, tr tree, publish tracingtest.Span) {
	t.Helper()
	require.Equal(t, publish.SpanID, tr.one(tracing.SpanIngest).ParentID)
	require.Equal(t, publish.SpanID, tr.one(tracing.SpanQueueWait).ParentID)
	run := tr.one(tracing.SpanRun)
	require.Equal(t, publish.SpanID, run.ParentID)
	require.Equal(t, "succeeded", run.Attrs["llmq.job.status"])
	require.Equal(t, []string{"retry", "fallback"}, run.Events)
	calls := tr.all(tracing.SpanCall)
	require.Len(t, calls, 3)
	for i, c := range calls {
		require.Equal(t, run.SpanID, c.ParentID)
		want := map[string]string{"gen_ai.request.model": "broken", "http.response.status_code": "500", "llmq.outcome": "retryable"}
		if i == 2 {
			want = map[string]string{"gen_ai.request.model": "backup", "http.response.status_code": "200", "llmq.outcome": "success"}
			require.NotEqual(t, "0", c.Attrs["gen_ai.usage.output_tokens"])
		}
		for k, v := range want {
			require.Equal(t, v, c.Attrs[k], "call %d: %s", i, k)
		}
		require.Equal(t, i < 2, c.Error, "call %d", i)
	}
	require.Len(t, tr.all(tracing.SpanQuotaWait), 3)
	write := tr.one(tracing.SpanResultSave)
	require.Equal(t, run.SpanID, write.ParentID)
	require.Equal(t, "store result", write.Attrs["llmq.write"])
}

// TestJobTrace: one job posted with a traceparent is one trace through
// each broker: the API's request, the publish, the worker's ingest, wait,
// run (its calls, retry and fallback) and result write.
func TestJobTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("tracing end to end: Postgres, brokers, worker, simulator")
	}
	brokers := map[string]func(t *testing.T) string{
		"memory":   func(*testing.T) string { return "memory://trace-" + uuid.NewString()[:8] + "/jobs" },
		"rabbitmq": func(t *testing.T) string { return rabbitmqtest.BrokerURL(rabbitmqtest.NewQueue(t)) },
		"kafka": func(t *testing.T) string {
			addrs := kafkatest.NewCluster(t)
			return "kafka://" + strings.Join(addrs, ",") + "/" + kafkatest.NewTopic(t, addrs, 1)
		},
	}
	for _, name := range []string{"memory", "rabbitmq", "kafka"} {
		t.Run(name, func(t *testing.T) {
			pl := setup(t, brokers[name](t))
			id := newTraceID()
			resp := pl.post(t, "/v1/jobs", id, `{"id":"traced","body":{"model":"broken","messages":[{"role":"user","content":"hi"}]}}`)
			require.Equal(t, http.StatusAccepted, resp.StatusCode)
			tr := pl.finished(t, id, "POST /v1/jobs")
			server := tr.one("POST /v1/jobs")
			require.Equal(t, "00f067aa0ba902b7", server.ParentID, "the caller's span is the root's parent")
			require.Equal(t, "202", server.Attrs["http.response.status_code"])
			publish := tr.one(tracing.SpanPublish)
			require.Equal(t, server.SpanID, publish.ParentID)
			assertRun(t, tr, publish)
			rec, err := pl.st.Jobs().Get(context.Background(), "acme", "traced")
			require.NoError(t, err)
			require.Equal(t, "00-"+id+"-"+publish.SpanID+"-01", rec.TraceContext)
		})
	}
}

// TestGatewayTrace: a gateway call is one trace from the caller's request
// to its answer, the worker's run (retry, fallback) inside it; the
// request duration histogram carries the trace id as an exemplar.
func TestGatewayTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("tracing end to end: Postgres, broker, worker, simulator")
	}
	pl := setup(t, "memory://trace-"+uuid.NewString()[:8]+"/jobs")
	id := newTraceID()
	resp := pl.post(t, "/v1/chat/completions", id, `{"model":"broken","messages":[{"role":"user","content":"hi"}]}`)
	body := new(bytes.Buffer)
	_, _ = body.ReadFrom(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, body.String())
	tr := pl.finished(t, id, "POST /v1/chat/completions")
	server := tr.one("POST /v1/chat/completions")
	require.Equal(t, "00f067aa0ba902b7", server.ParentID)
	publish := tr.one(tracing.SpanPublish)
	require.Equal(t, server.SpanID, publish.ParentID)
	assertRun(t, tr, publish)
	// The answer waits for the result's commit, which the worker's span
	// of the write sees only after it (it may end after the answer).
	require.False(t, server.End.Before(tr.one(tracing.SpanResultSave).Start), "the call's span ends after the result's write began")

	families, err := pl.reg.Gather()
	require.NoError(t, err)
	exemplars := 0
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, b := range m.GetHistogram().GetBucket() {
				for _, l := range b.GetExemplar().GetLabel() {
					if l.GetName() == "trace_id" && l.GetValue() == id {
						exemplars++
					}
				}
			}
		}
	}
	require.Equal(t, 1, exemplars, "one exemplar of the call's trace on the request duration histogram")
}

// TestJobShowsTraceID: GET /v1/jobs/{id} answers the job's trace id, the
// one its enqueue continued.
func TestJobShowsTraceID(t *testing.T) {
	if testing.Short() {
		t.Skip("tracing end to end: Postgres, broker, worker, simulator")
	}
	pl := setup(t, "memory://trace-"+uuid.NewString()[:8]+"/jobs")
	id := newTraceID()
	resp := pl.post(t, "/v1/jobs", id, `{"id":"shown","body":{"model":"backup","messages":[{"role":"user","content":"hi"}]}}`)
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	req, err := http.NewRequest(http.MethodGet, pl.srv.URL+"/v1/jobs/shown", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	got, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer got.Body.Close()
	var job api.Job
	require.NoError(t, json.NewDecoder(got.Body).Decode(&job))
	require.Equal(t, id, job.TraceID)
}

// TestBareMessageTrace: a job published straight to the broker without
// trace headers starts its trace at the worker's ingest, and its wait and
// run are in that trace.
func TestBareMessageTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("tracing end to end: Postgres, broker, worker, simulator")
	}
	pl := setup(t, "memory://trace-"+uuid.NewString()[:8]+"/jobs")
	require.NoError(t, pl.pub.Publish(context.Background(), pl.dest, transport.Message{
		Value: []byte(`{"id":"bare","tenant":"acme","body":{"model":"backup","messages":[{"role":"user","content":"hi"}]}}`)}))
	var id string
	pl.recv.WaitFor(t, 60*time.Second, func(spans []tracingtest.Span) bool {
		for _, s := range spans {
			if s.Name == tracing.SpanRun && s.Attrs["llmq.job.id"] == "bare" && s.Attrs["llmq.job.status"] != "" {
				id = s.TraceID
				return true
			}
		}
		return false
	})
	tr := tree{t: t, spans: pl.recv.Trace(id)}
	ingest := tr.one(tracing.SpanIngest)
	require.Empty(t, ingest.ParentID, "the trace starts at the ingest")
	require.Equal(t, ingest.SpanID, tr.one(tracing.SpanQueueWait).ParentID)
	require.Equal(t, ingest.SpanID, tr.one(tracing.SpanRun).ParentID)
}

// TestQueueWaitReasons: of two jobs of a tenant whose concurrency is 1,
// the one posted while the other runs waits for its tenant's quota: its
// llmq.queue.wait span has the event tenant_quota, the first's none.
func TestQueueWaitReasons(t *testing.T) {
	if testing.Short() {
		t.Skip("tracing end to end: Postgres, broker, worker, simulator")
	}
	pl := setup(t, "memory://trace-"+uuid.NewString()[:8]+"/jobs",
		options{ttft: time.Second, tenants: llmq.Tenants{"acme": {Scope: llmq.Scope{Concurrency: 1}}}})
	ids := []string{newTraceID(), newTraceID()}
	body := `{"id":"%s","body":{"model":"backup","messages":[{"role":"user","content":"hi"}]}}`
	resp := pl.post(t, "/v1/jobs", ids[0], fmt.Sprintf(body, "first"))
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	require.Eventually(t, func() bool {
		rec, err := pl.st.Jobs().Get(context.Background(), "acme", "first")
		return err == nil && rec.Status == llmq.StatusRunning
	}, 30*time.Second, 5*time.Millisecond)
	resp = pl.post(t, "/v1/jobs", ids[1], fmt.Sprintf(body, "second"))
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	for i, want := range [][]string{nil, {store.WaitingReasonTenantQuota}} {
		tr := pl.finished(t, ids[i], "POST /v1/jobs")
		require.Equal(t, "succeeded", tr.one(tracing.SpanRun).Attrs["llmq.job.status"])
		require.Equal(t, want, tr.one(tracing.SpanQueueWait).Events, "job %d", i)
	}
}
