package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	legacyrouter "github.com/getkin/kin-openapi/routers/legacy"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
)

// conformance checks exchanges with the running server against the
// embedded OpenAPI document.
type conformance struct {
	doc    *openapi3.T
	router routers.Router
	seen   map[string]bool // "METHOD path status"
	// header is added to the next requests (checkWith).
	header http.Header
}

func newConformance(t *testing.T) *conformance {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI())
	require.NoError(t, err)
	require.NoError(t, doc.Validate(loader.Context))
	// Gateway streams are server-sent events: text, as documented.
	openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.PlainBodyDecoder)
	router, err := legacyrouter.NewRouter(doc)
	require.NoError(t, err)
	return &conformance{doc: doc, router: router, seen: map[string]bool{}}
}

// check sends the request to b's server; the response must be documented
// for the operation (status, headers, body schema). validRequest says the
// request itself must satisfy the document too.
func (c *conformance) check(t *testing.T, b *testBundle, method, path, key, ctype, body string, validRequest bool, wantStatus int) {
	t.Helper()
	req, err := http.NewRequest(method, b.srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	// The document's server is "/": route on the path alone.
	routed := req.Clone(context.Background())
	routed.URL = &url.URL{Path: req.URL.Path, RawQuery: req.URL.RawQuery}
	routed.Body = io.NopCloser(strings.NewReader(body))
	route, params, err := c.router.FindRoute(routed)
	require.NoError(t, err, "%s %s is not documented", method, path)
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true}
	in := &openapi3filter.RequestValidationInput{Request: routed, PathParams: params, Route: route, Options: opts}
	if validRequest {
		require.NoError(t, openapi3filter.ValidateRequest(context.Background(), in), "request %s %s", method, path)
	}
	resp, err := b.srv.Client().Do(req)
	require.NoError(t, err)
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, wantStatus, resp.StatusCode, "%s %s: %s", method, path, data)
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode,
		Header: resp.Header, Options: opts}
	out.SetBodyBytes(data)
	require.NoError(t, openapi3filter.ValidateResponse(context.Background(), out), "response of %s %s (%d): %s",
		method, path, resp.StatusCode, data)
	c.seen[fmt.Sprintf("%s %s %d", route.Method, route.Path, resp.StatusCode)] = true
}

// checkWith is check with the operator key and an If-Match ("" none).
func (c *conformance) checkWith(t *testing.T, b *testBundle, method, path, body, ifMatch string, wantStatus int) {
	t.Helper()
	c.header = http.Header{}
	if ifMatch != "" {
		c.header.Set("If-Match", ifMatch)
	}
	defer func() { c.header = nil }()
	ctype := ""
	if body != "" {
		ctype = "application/json"
	}
	c.check(t, b, method, path, keyOps, ctype, body, wantStatus < 400, wantStatus)
}

func TestOpenAPIConformance(t *testing.T) {
	t.Parallel()
	c := newConformance(t)
	const ct = "application/json"
	b := setup(t, options{api: func(cfg *api.Config) { cfg.MaxBodyBytes = 4 << 10 }})

	c.check(t, b, "GET", "/healthz", "", "", "", true, 200)
	c.check(t, b, "GET", "/readyz", "", "", "", true, 200)
	c.check(t, b, "GET", "/openapi.yaml", "", "", "", true, 200)
	c.check(t, b, "POST", "/v1/jobs", keyAcme, ct, `{"id":"one","priority":"low","metadata":{"a":"b"},"body":`+validBody+`}`, true, 202)
	c.check(t, b, "POST", "/v1/jobs", keyAcme, ct, `{"id":"one","body":`+validBody+`}`, true, 202)
	c.check(t, b, "POST", "/v1/jobs", keyGlobex, ct, `{"jobs":[`+jobJSON("g1")+`,`+jobJSON("one")+`]}`, true, 202)
	c.check(t, b, "POST", "/v1/jobs", keyGlobex, ct, jobJSON("one"), true, 202)
	c.check(t, b, "POST", "/v1/jobs", keyAcme, ct, `{"body":{"model":"m"}}`, false, 400)
	c.check(t, b, "POST", "/v1/jobs", "", ct, jobJSON(""), true, 401)
	c.check(t, b, "POST", "/v1/jobs", keyAcme, ct, `{"body":{"model":"m","pad":"`+strings.Repeat("x", 5<<10)+`"}}`, false, 413)
	c.check(t, b, "POST", "/v1/jobs", keyAcme, "text/plain", jobJSON(""), false, 415)
	c.check(t, b, "GET", "/v1/jobs?limit=1", keyAcme, "", "", true, 200)
	c.check(t, b, "GET", "/v1/jobs?status=queued&limit=100", keyAcme, "", "", true, 200)
	c.check(t, b, "GET", "/v1/jobs?limit=0", keyAcme, "", "", false, 400)
	c.check(t, b, "GET", "/v1/jobs", "", "", "", true, 401)
	c.check(t, b, "GET", "/v1/jobs/one", keyAcme, "", "", true, 200)
	c.check(t, b, "GET", "/v1/jobs/one", keyGlobex, "", "", true, 200)
	c.check(t, b, "GET", "/v1/jobs/none", keyAcme, "", "", true, 404)
	c.check(t, b, "GET", "/v1/jobs/one", "", "", "", true, 401)
	c.check(t, b, "GET", "/v1/queue", keyAcme, "", "", true, 200)
	c.check(t, b, "GET", "/v1/queue", "", "", "", true, 401)
	c.check(t, b, "DELETE", "/v1/jobs/one", keyAcme, "", "", true, 200)
	c.check(t, b, "DELETE", "/v1/jobs/one", keyAcme, "", "", true, 409)
	c.check(t, b, "DELETE", "/v1/jobs/one", keyGlobex, "", "", true, 200)
	c.check(t, b, "DELETE", "/v1/jobs/none", keyGlobex, "", "", true, 404)
	c.check(t, b, "DELETE", "/v1/jobs/one", "", "", "", true, 401)

	// Notifications: acme's job "nt" has a route and succeeded.
	ctx := context.Background()
	nj, err := llmq.Decode([]byte(jobJSON("nt")), llmq.DecodeOptions{})
	require.NoError(t, err)
	nj.Tenant, nj.ReplyTo = "acme", &llmq.Reply{To: "replies", CorrelationID: "c1"}
	_, err = b.store.Jobs().Insert(ctx, nj)
	require.NoError(t, err)
	_, err = b.store.Queue().StoreResult(ctx, store.Key{Tenant: "acme", ID: "nt"}, store.Result{Response: []byte(`{"id":"x"}`), UsedModel: "gpt-4o-mini"})
	require.NoError(t, err)
	ns, err := b.store.Notifications().List(ctx, store.NotificationFilter{Tenant: "acme"})
	require.NoError(t, err)
	require.Len(t, ns, 1)
	c.check(t, b, "GET", "/v1/notifications", keyAcme, "", "", true, 200)
	c.check(t, b, "GET", "/v1/notifications?state=pending&limit=5", keyOps, "", "", true, 200)
	c.check(t, b, "GET", "/v1/notifications?state=lost", keyAcme, "", "", false, 400)
	c.check(t, b, "GET", "/v1/notifications", "", "", "", true, 401)
	c.check(t, b, "POST", "/v1/notifications/"+ns[0].EventID+"/replay", keyAcme, "", "", true, 200)
	c.check(t, b, "POST", "/v1/notifications/"+ns[0].EventID+"/replay", keyGlobex, "", "", true, 404)
	c.check(t, b, "POST", "/v1/notifications/"+ns[0].EventID+"/replay", "", "", "", true, 401)
	c.check(t, b, "POST", "/v1/notifications/replay", keyAcme, "application/json", `{}`, true, 200)
	c.check(t, b, "POST", "/v1/notifications/replay", keyOps, "application/json", `{"job_id":"nt"}`, true, 200)
	c.check(t, b, "POST", "/v1/notifications/replay", keyAcme, "application/json", `{"job_id":"a b"}`, true, 400)
	c.check(t, b, "POST", "/v1/notifications/replay", keyAcme, "application/json", `{"tenant":"x"}`, false, 400)
	c.check(t, b, "POST", "/v1/notifications/replay", keyAcme, "text/plain", `{}`, false, 415)
	c.check(t, b, "POST", "/v1/notifications/replay", "", "application/json", `{}`, true, 401)

	// Dead letters: acme's job "dl" was dead-lettered, and a poison message.
	j, err := llmq.Decode([]byte(jobJSON("dl")), llmq.DecodeOptions{})
	require.NoError(t, err)
	j.Tenant = "acme"
	_, err = b.store.Jobs().Insert(ctx, j)
	require.NoError(t, err)
	require.NoError(t, b.letters.DeadLetter(ctx, dlq.Letter{JobID: "dl", Tenant: "acme", Reason: dlq.ReasonRetriesExhausted,
		LastError: "server_error: 500", Attempts: 6, Model: "gpt-4o-mini", Message: []byte(jobJSON("dl"))}))
	require.NoError(t, b.letters.DeadLetter(ctx, dlq.Letter{Tenant: "acme", Reason: dlq.ReasonPoison,
		LastError: "not JSON", Message: []byte("\xffnot json")}))
	c.check(t, b, "GET", "/v1/dead-letters", keyAcme, "", "", true, 200)
	c.check(t, b, "GET", "/v1/dead-letters?reason=retries_exhausted&limit=1", keyAcme, "", "", true, 200)
	c.check(t, b, "GET", "/v1/dead-letters?reason=oops", keyAcme, "", "", false, 400)
	c.check(t, b, "GET", "/v1/dead-letters", "", "", "", true, 401)
	c.check(t, b, "GET", "/v1/dead-letters/1", keyAcme, "", "", true, 200)
	c.check(t, b, "GET", "/v1/dead-letters/2", keyAcme, "", "", true, 200)
	c.check(t, b, "GET", "/v1/dead-letters/1", keyGlobex, "", "", true, 404)
	c.check(t, b, "GET", "/v1/dead-letters/1", "", "", "", true, 401)
	c.check(t, b, "POST", "/v1/dead-letters/1/replay", keyAcme, "", "", true, 200)
	c.check(t, b, "POST", "/v1/dead-letters/1/replay", keyAcme, "", "", true, 200)
	c.check(t, b, "POST", "/v1/dead-letters/1/replay", keyGlobex, "", "", true, 404)
	c.check(t, b, "POST", "/v1/dead-letters/1/replay", "", "", "", true, 401)
	// The job of letter 3 left dead_lettered another way: 409.
	_, err = b.store.Jobs().Insert(ctx, j)
	require.NoError(t, err)
	require.NoError(t, b.letters.DeadLetter(ctx, dlq.Letter{JobID: "dl", Tenant: "acme", Reason: dlq.ReasonExpired,
		Message: []byte(jobJSON("dl"))}))
	_, err = b.store.DeadLetters().Requeue(ctx, "acme", "dl")
	require.NoError(t, err)
	c.check(t, b, "POST", "/v1/dead-letters/3/replay", keyAcme, "", "", true, 409)

	// Letters counted by reason, replayed and purged by filter.
	c.check(t, b, "GET", "/v1/dead-letters/reasons", keyAcme, "", "", true, 200)
	c.check(t, b, "GET", "/v1/dead-letters/reasons?since=2026-11-30T00:00:00Z&tenant=acme", keyOps, "", "", true, 200)
	c.check(t, b, "GET", "/v1/dead-letters/reasons?since=yesterday", keyAcme, "", "", false, 400)
	c.check(t, b, "GET", "/v1/dead-letters/reasons", "", "", "", true, 401)
	c.check(t, b, "POST", "/v1/dead-letters/replay", keyAcme, ct, `{"reason":"poison"}`, true, 200)
	c.check(t, b, "POST", "/v1/dead-letters/replay", keyAcme, ct, `{}`, true, 400)
	c.check(t, b, "POST", "/v1/dead-letters/replay", keyAcme, "text/plain", `{}`, false, 415)
	c.check(t, b, "POST", "/v1/dead-letters/replay", "", ct, `{"ids":[1]}`, true, 401)
	c.check(t, b, "POST", "/v1/dead-letters/purge", keyAcme, ct, `{"ids":[2]}`, true, 200)
	c.check(t, b, "POST", "/v1/dead-letters/purge", keyAcme, ct, `{}`, true, 400)
	c.check(t, b, "POST", "/v1/dead-letters/purge", keyAcme, "text/plain", `{}`, false, 415)
	c.check(t, b, "POST", "/v1/dead-letters/purge", "", ct, `{"all":true}`, true, 401)

	// Who a key is; the jobs by status; an operator sees every tenant and
	// names the tenant of one job.
	c.check(t, b, "GET", "/v1/me", keyAcme, "", "", true, 200)
	c.check(t, b, "GET", "/v1/me", keyOps, "", "", true, 200)
	c.check(t, b, "GET", "/v1/me", "", "", "", true, 401)
	c.check(t, b, "GET", "/v1/stats/jobs", keyAcme, "", "", true, 200)
	c.check(t, b, "GET", "/v1/stats/jobs?tenant=globex", keyOps, "", "", true, 200)
	c.check(t, b, "GET", "/v1/stats/jobs?tenant=globex", keyAcme, "", "", true, 400)
	c.check(t, b, "GET", "/v1/stats/jobs", "", "", "", true, 401)
	c.check(t, b, "GET", "/v1/usage", keyAcme, "", "", true, 200)
	c.check(t, b, "GET", "/v1/usage", keyOps, "", "", true, 200)
	c.check(t, b, "GET", "/v1/usage?tenant=globex", keyAcme, "", "", true, 400)
	c.check(t, b, "GET", "/v1/usage", "", "", "", true, 401)
	c.check(t, b, "GET", "/v1/jobs", keyOps, "", "", true, 200)
	c.check(t, b, "GET", "/v1/jobs/g1?tenant=globex", keyOps, "", "", true, 200)
	c.check(t, b, "GET", "/v1/jobs/g1", keyOps, "", "", true, 400)
	c.check(t, b, "DELETE", "/v1/jobs/g1", keyOps, "", "", true, 400)
	c.check(t, b, "DELETE", "/v1/jobs/g1?tenant=globex", keyOps, "", "", true, 200)
	c.check(t, b, "POST", "/v1/jobs?tenant=globex", keyOps, ct, jobJSON("by-ops"), true, 202)

	// Provider batches: operators only. b cannot reach a provider: a
	// cancellation is 503.
	c.check(t, b, "POST", "/v1/batches/lb_x/cancel", keyOps, "", "", true, 503)
	lane := setup(t, options{batches: true})
	c.check(t, lane, "POST", "/v1/jobs", keyAcme, ct, `{"jobs":[`+jobJSON("b1")+`,`+jobJSON("b2")+`]}`, true, 202)
	batch := lane.batch(t, "b1", "b2")
	c.check(t, lane, "GET", "/v1/batches", keyOps, "", "", true, 200)
	c.check(t, lane, "GET", "/v1/batches?open=true&limit=10", keyOps, "", "", true, 200)
	c.check(t, lane, "GET", "/v1/batches?limit=0", keyOps, "", "", false, 400)
	c.check(t, lane, "GET", "/v1/batches", keyAcme, "", "", true, 403)
	c.check(t, lane, "GET", "/v1/batches", "", "", "", true, 401)
	c.check(t, lane, "GET", "/v1/batches/"+batch, keyOps, "", "", true, 200)
	c.check(t, lane, "GET", "/v1/batches/lb_none", keyOps, "", "", true, 404)
	c.check(t, lane, "GET", "/v1/batches/"+batch, keyAcme, "", "", true, 403)
	c.check(t, lane, "GET", "/v1/batches/"+batch, "", "", "", true, 401)
	c.check(t, lane, "POST", "/v1/batches/"+batch+"/cancel", keyAcme, "", "", true, 403)
	c.check(t, lane, "POST", "/v1/batches/lb_none/cancel", keyOps, "", "", true, 404)
	c.check(t, lane, "POST", "/v1/batches/"+batch+"/cancel", keyOps, "", "", true, 200)
	c.check(t, lane, "POST", "/v1/batches/"+batch+"/cancel", "", "", "", true, 401)

	// A job's calls, and the calls per model.
	calls := setup(t, options{})
	calls.callTwice(t, keyAcme, "c1")
	c.check(t, calls, "GET", "/v1/jobs/c1", keyAcme, "", "", true, 200)
	c.check(t, calls, "GET", "/v1/stats/models", keyAcme, "", "", true, 200)
	c.check(t, calls, "GET", "/v1/stats/models?window=15m&tenant=acme", keyOps, "", "", true, 200)
	c.check(t, calls, "GET", "/v1/stats/models?window=2d", keyAcme, "", "", true, 400)
	c.check(t, calls, "GET", "/v1/stats/models", "", "", "", true, 401)
	c.check(t, calls, "GET", "/v1/stats/arrivals", keyAcme, "", "", true, 200)
	c.check(t, calls, "GET", "/v1/stats/arrivals?window=15m&tenant=acme", keyOps, "", "", true, 200)
	c.check(t, calls, "GET", "/v1/stats/arrivals?window=25h", keyAcme, "", "", true, 400)
	c.check(t, calls, "GET", "/v1/stats/arrivals", "", "", "", true, 401)

	// A full queue and a deadline that cannot be met.
	full := setup(t, options{producer: func(pc *producer.Config) { pc.SoftDepth, pc.HardDepth = 1, 2 }})
	c.check(t, full, "POST", "/v1/jobs", keyAcme, ct, `{"jobs":[`+jobJSON("f1")+`,`+jobJSON("f2")+`]}`, true, 202)
	c.check(t, full, "POST", "/v1/jobs", keyAcme, ct, jobJSON("f3"), true, 429)

	// A key over its requests per minute, on llmq's shape and OpenAI's.
	limited := setup(t, options{api: func(c *api.Config) {
		c.RateLimits.KeyRPM = 1
		c.JobsDone = c.Store.(*store.Jobs)
	}})
	c.check(t, limited, "GET", "/v1/me", keyAcme, "", "", true, 200)
	c.check(t, limited, "GET", "/v1/me", keyAcme, "", "", true, 429)
	c.check(t, limited, "GET", "/v1/models", keyAcme, "", "", true, 429)
	c.check(t, limited, "POST", "/v1/jobs", keyAcme, ct, jobJSON("r1"), true, 429)

	// The broker cannot be measured: 503, and readyz says so.
	down := setup(t, options{})
	require.NoError(t, down.sub.Close())
	c.check(t, down, "POST", "/v1/jobs", keyAcme, ct, jobJSON("d1"), true, 503)
	c.check(t, down, "GET", "/v1/queue", keyAcme, "", "", true, 503)
	c.check(t, down, "GET", "/readyz", "", "", "", true, 503)
	require.Equal(t, http.StatusNotFound, down.get(t, keyAcme, "/v1/jobs/d1").status, "a 503 records nothing")

	// Postgres is gone: 503 database_unavailable.
	dbDown := setup(t, options{})
	dbDown.store.Pool().Close()
	c.check(t, dbDown, "POST", "/v1/jobs", keyAcme, ct, jobJSON("x1"), true, 503)
	require.Equal(t, api.CodeDatabaseUnavailable, dbDown.post(t, keyAcme, jobJSON("x1")).apiError(t).Code)
	c.check(t, dbDown, "GET", "/v1/queue", keyAcme, "", "", true, 503)
	c.check(t, dbDown, "GET", "/readyz", "", "", "", true, 503)
	// readyz is not authenticated: it names the failing part, not its
	// error (addresses, users).
	require.Equal(t, map[string]any{"status": "unavailable", "checks": map[string]any{"database": "unavailable", "broker": "ok"}},
		dbDown.get(t, "", "/readyz").json(t))
	require.Equal(t, map[string]any{"status": "unavailable", "checks": map[string]any{"database": "ok", "broker": "unavailable"}},
		down.get(t, "", "/readyz").json(t))
	require.Equal(t, int64(0), dbDown.broker.Depth("jobs"))

	// Gateway mode: a call that a stand-in worker answers, a stream, the
	// refusals, the models.
	gw := setup(t, options{api: func(c *api.Config) {
		c.JobsDone = c.Store.(*store.Jobs)
		c.Catalog = llmq.Catalog{Models: map[string]llmq.Model{"gpt-4o-mini": {}}}
	}})
	msgs, err := gw.sub.Consume(t.Context())
	require.NoError(t, err)
	answered := make(chan error, 1)
	go func() { // a stand-in worker: it answers the two calls below
		for range 2 {
			m := <-msgs
			j, err := llmq.Decode(m.Value, llmq.DecodeOptions{})
			if err == nil {
				// Ingested as a worker does: the message may come before
				// the producer's commit, which this insert waits for.
				_, err = gw.store.Queue().Ingest(context.Background(), []store.NewJob{{Job: j}})
			}
			if err == nil {
				_, err = gw.store.Queue().StoreResult(context.Background(), store.Key{Tenant: j.Tenant, ID: j.ID}, store.Result{
					Response: []byte(`{"id":"c1","object":"chat.completion","created":1,"model":"gpt-4o-mini",` +
						`"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`)})
			}
			if err != nil {
				answered <- err
				return
			}
		}
		answered <- nil
	}()
	c.check(t, gw, "POST", "/v1/chat/completions", keyAcme, ct, validBody, true, 200)
	c.check(t, gw, "POST", "/v1/chat/completions", keyAcme, ct,
		`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`, true, 200)
	require.NoError(t, <-answered)
	c.check(t, gw, "POST", "/v1/chat/completions", keyAcme, ct, `{"model":"o3","messages":[{"role":"user","content":"hi"}]}`, true, 400)
	c.check(t, gw, "POST", "/v1/chat/completions", "", ct, validBody, true, 401)
	c.check(t, gw, "GET", "/v1/models", keyAcme, "", "", true, 200)
	c.check(t, gw, "GET", "/v1/models", "", "", "", true, 401)

	// The admin API, on a bundle serving the tenancy kept as data.
	ad, _ := adminBundle(t)
	c.check(t, ad, "GET", "/v1/admin/tenants", keyAcme, "", "", true, 403)
	c.check(t, ad, "POST", "/v1/admin/tenants", keyOps, ct, `{"name":"initech","tpm":1000,"allow_unknown_projects":true}`, true, 201)
	c.check(t, ad, "POST", "/v1/admin/tenants", keyOps, ct, `{"name":"initech"}`, true, 409)
	c.check(t, ad, "POST", "/v1/admin/tenants", keyOps, ct, `{"name":"x","tpm":-1}`, false, 400)
	c.check(t, ad, "GET", "/v1/admin/tenants", keyOps, "", "", true, 200)
	c.check(t, ad, "GET", "/v1/admin/tenants/initech", keyOps, "", "", true, 200)
	c.check(t, ad, "GET", "/v1/admin/tenants/nobody", keyOps, "", "", true, 404)
	c.checkWith(t, ad, "PUT", "/v1/admin/tenants/initech", `{"tpm":2000}`, "", 428)
	c.checkWith(t, ad, "PUT", "/v1/admin/tenants/initech", `{"tpm":2000}`, `"1"`, 200)
	c.checkWith(t, ad, "PUT", "/v1/admin/tenants/initech", `{"tpm":3000}`, `"1"`, 412)
	c.check(t, ad, "POST", "/v1/admin/tenants/initech/pause", keyOps, "", "", true, 200)
	c.check(t, ad, "POST", "/v1/admin/tenants/initech/resume", keyOps, "", "", true, 200)
	c.check(t, ad, "PUT", "/v1/admin/tenants/initech/projects/bulk", keyOps, ct, `{"rpm":5}`, true, 201)
	c.check(t, ad, "PUT", "/v1/admin/tenants/initech/projects/bulk", keyOps, ct, `{"rpm":5}`, true, 409)
	c.checkWith(t, ad, "PUT", "/v1/admin/tenants/initech/projects/bulk", `{"rpm":6}`, `"1"`, 200)
	c.check(t, ad, "GET", "/v1/admin/tenants/initech/projects/bulk", keyOps, "", "", true, 200)
	c.check(t, ad, "POST", "/v1/admin/tenants/initech/projects/bulk/pause", keyOps, "", "", true, 200)
	c.checkWith(t, ad, "DELETE", "/v1/admin/tenants/initech/projects/bulk", "", `"1"`, 412)
	c.checkWith(t, ad, "DELETE", "/v1/admin/tenants/initech/projects/bulk", "", `"3"`, 204)
	c.check(t, ad, "POST", "/v1/admin/keys", keyOps, ct, `{"name":"ci","tenant":"initech","expires_at":"2027-01-01T00:00:00Z"}`, true, 201)
	c.check(t, ad, "POST", "/v1/admin/keys", keyOps, ct, `{"name":"ci","tenant":"initech"}`, true, 409)
	c.check(t, ad, "GET", "/v1/admin/keys", keyOps, "", "", true, 200)
	c.check(t, ad, "GET", "/v1/admin/keys/ci", keyOps, "", "", true, 200)
	c.check(t, ad, "POST", "/v1/admin/keys/ci/revoke", keyOps, "", "", true, 200)
	c.check(t, ad, "POST", "/v1/admin/keys/nobody/revoke", keyOps, "", "", true, 404)
	c.check(t, ad, "POST", "/v1/admin/models", keyOps, ct, `{"name":"m1","rpm":60,"tpm":6000}`, true, 201)
	c.check(t, ad, "POST", "/v1/admin/models", keyOps, ct, `{"name":"m1"}`, true, 409)
	c.check(t, ad, "POST", "/v1/admin/models", keyOps, ct, `{"name":"x","fallbacks":["nope"]}`, false, 400)
	c.check(t, ad, "POST", "/v1/admin/models", keyOps, ct, `{"name":"f","fallbacks":["m1"]}`, true, 201)
	c.check(t, ad, "GET", "/v1/admin/models", keyOps, "", "", true, 200)
	c.check(t, ad, "GET", "/v1/admin/models/m1", keyOps, "", "", true, 200)
	c.check(t, ad, "GET", "/v1/admin/models/none", keyOps, "", "", true, 404)
	c.checkWith(t, ad, "PUT", "/v1/admin/models/m1", `{"tpm":9000}`, `"1"`, 200)
	c.checkWith(t, ad, "PUT", "/v1/admin/models/m1", `{"tpm":9000}`, `"1"`, 412)
	c.checkWith(t, ad, "DELETE", "/v1/admin/models/m1", "", `"2"`, 409)
	c.checkWith(t, ad, "DELETE", "/v1/admin/models/f", "", `"1"`, 204)
	c.check(t, ad, "GET", "/v1/admin/audit?limit=5", keyOps, "", "", true, 200)
	c.check(t, ad, "GET", "/v1/admin/audit?limit=0", keyOps, "", "", false, 400)
	c.checkWith(t, ad, "DELETE", "/v1/admin/tenants/initech", "", "", 428)
	c.checkWith(t, ad, "DELETE", "/v1/admin/tenants/initech", "", `"4"`, 204)

	// The tenants' result routes and webhook secrets.
	nb := notificationsBundle(t)
	c.check(t, nb, "PUT", "/v1/admin/tenants/acme/notifications", keyOps, ct, `{"reply_to":"acme-results"}`, true, 201)
	c.check(t, nb, "PUT", "/v1/admin/tenants/acme/notifications", keyOps, ct, `{"webhook":"http://x"}`, false, 400)
	c.checkWith(t, nb, "PUT", "/v1/admin/tenants/acme/notifications", `{"webhook":"https://acme.example/h"}`, `"1"`, 200)
	c.check(t, nb, "GET", "/v1/admin/tenants/acme/notifications", keyOps, "", "", true, 200)
	c.check(t, nb, "GET", "/v1/admin/notifications", keyOps, "", "", true, 200)
	c.check(t, nb, "POST", "/v1/admin/tenants/acme/notifications/secrets", keyOps, "", "", true, 201)
	c.check(t, nb, "DELETE", "/v1/admin/tenants/acme/notifications/secrets/previous", keyOps, "", "", true, 200)
	c.checkWith(t, nb, "DELETE", "/v1/admin/tenants/acme/notifications", "", "", 428)
	c.checkWith(t, nb, "DELETE", "/v1/admin/tenants/acme/notifications", "", `"4"`, 204)

	// Every documented operation was exercised.
	for path, item := range c.doc.Paths.Map() {
		for method := range item.Operations() {
			found := false
			for k := range c.seen {
				if strings.HasPrefix(k, method+" "+path+" ") {
					found = true
				}
			}
			require.True(t, found, "%s %s was not exercised", method, path)
		}
	}
}

// TestPublishFailureStillAccepted: the broker was measured, the row is
// recorded, then the publish fails: 202 with published false, and the
// sweeper publishes the job once the broker takes messages again.
func TestPublishFailureStillAccepted(t *testing.T) {
	t.Parallel()
	failing := &flakyPublisher{}
	failing.fail.Store(true)
	b := setup(t, options{producer: func(pc *producer.Config) { pc.Publisher = failing }})
	failing.inner = b.broker.NewPublisher()
	r := b.post(t, keyAcme, jobJSON("kept"))
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	require.Equal(t, false, r.json(t)["published"])
	require.Equal(t, "queued", b.get(t, keyAcme, "/v1/jobs/kept").json(t)["status"])
	require.Equal(t, int64(0), b.broker.Depth("jobs"))

	failing.fail.Store(false)
	b.clock.Advance(producer.SweepGraceDefault + time.Second)
	n, err := b.producer.Sweep(context.Background(), producer.SweepGraceDefault, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, int64(1), b.broker.Depth("jobs"))
}

// flakyPublisher refuses every publish while fail is set (a broker that
// went away after the depth probe), else publishes through inner.
type flakyPublisher struct {
	fail  atomic.Bool
	inner transport.Publisher
}

func (p *flakyPublisher) Publish(ctx context.Context, dest string, msgs ...transport.Message) error {
	if p.fail.Load() {
		return fmt.Errorf("broker went away: %w", io.ErrUnexpectedEOF)
	}
	return p.inner.Publish(ctx, dest, msgs...)
}

func (p *flakyPublisher) Close() error { return nil }
