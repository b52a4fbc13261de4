package console_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/internal/app/console"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
	"github.com/llmq/llmq/transport/memory"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"))
}

var quiet = slog.New(slog.DiscardHandler)

const (
	keyAcme   = "key-acme-console"
	keyGlobex = "key-globex-console"
	keyOps    = "key-operator-console"
)

// bundle is an API on its own database and in-memory broker with the
// console over it, served as `llmq api` serves them.
type bundle struct {
	store   *store.Store
	clock   *clockwork.FakeClock
	srv     *httptest.Server
	letters *dlq.Writer
	api     http.Handler
}

func setup(t *testing.T) *bundle { t.Helper(); return setupWith(t, nil) }

// setupWith is setup with the API's configuration changed by mutate,
// given the store.
func setupWith(t *testing.T, mutate func(*api.Config, *store.Store)) *bundle {
	t.Helper()
	st := store.New(storetest.NewPool(t))
	b := memory.New()
	sub, err := b.NewSubscriber("jobs", memory.Config{Prefetch: 1000})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	reg := prometheus.NewRegistry()
	p, err := producer.New(producer.Config{Publisher: b.NewPublisher(), Store: st.Outbox(), Destination: "jobs", DepthProbe: sub,
		DepthTTL: -1, Logger: quiet, Registerer: reg})
	require.NoError(t, err)
	dcfg := dlq.Config{Store: st.DeadLetters(), Publisher: b.NewPublisher(), Destination: "jobs", Logger: quiet}
	svc, err := dlq.NewService(dcfg)
	require.NoError(t, err)
	letters, err := dlq.NewWriter(dcfg)
	require.NoError(t, err)
	acfg := api.Config{Producer: p, Store: st.Jobs(), Keys: map[string]string{keyAcme: "acme", keyGlobex: "globex"},
		OperatorKeys: []api.OperatorKey{{Key: keyOps}}, DeadLetterService: svc, Notifications: st.Notifications(),
		Batches: st.Batches(), Usage: store.New(st.Pool(), store.WithOrder(store.Order{Tenants: consoleTenants})).Budgets(), Tenants: consoleTenants,
		Logger: quiet}
	if mutate != nil {
		mutate(&acfg, st)
	}
	a, err := api.New(acfg)
	require.NoError(t, err)
	clk := clockwork.NewFakeClockAt(time.Now())
	ui, err := console.New(console.Config{API: a, Logger: quiet, Clock: clk})
	require.NoError(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, console.Prefix) {
			ui.ServeHTTP(w, r)
			return
		}
		a.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return &bundle{store: st, clock: clk, srv: srv, letters: letters, api: a}
}

// browser is a client with a cookie jar that does not follow redirects.
type browser struct {
	t      *testing.T
	b      *bundle
	client *http.Client
}

func (b *bundle) browser(t *testing.T) *browser {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(c.CloseIdleConnections)
	return &browser{t: t, b: b, client: c}
}

type page struct {
	status int
	header http.Header
	body   string
}

func (br *browser) do(method, path string, form url.Values, header map[string]string) page {
	br.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, br.b.srv.URL+path, body)
	require.NoError(br.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := br.client.Do(req)
	require.NoError(br.t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(br.t, err)
	return page{status: resp.StatusCode, header: resp.Header, body: string(data)}
}

func (br *browser) get(path string) page { br.t.Helper(); return br.do(http.MethodGet, path, nil, nil) }

func (br *browser) post(path string, form url.Values) page {
	br.t.Helper()
	return br.do(http.MethodPost, path, form, nil)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the CSRF token of the first form of a page.
func csrf(t *testing.T, p page) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(p.body)
	require.NotNil(t, m, "the page has a form with a CSRF token: %s", p.body)
	return m[1]
}

// signIn signs in with key through the sign-in form.
func (br *browser) signIn(key string) page {
	br.t.Helper()
	login := br.get("/ui/login")
	require.Equal(br.t, http.StatusOK, login.status)
	return br.post("/ui/login", url.Values{"csrf": {csrf(br.t, login)}, "key": {key}})
}

func (b *bundle) enqueue(t *testing.T, key, id string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.srv.URL+"/v1/jobs",
		strings.NewReader(`{"id":"`+id+`","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.srv.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
}

// TestHeaders: every answer of the console carries the
// Content-Security-Policy and the other protective headers; pages are not
// cached; the assets are embedded.
func TestHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	br := b.browser(t)
	for _, path := range []string{"/ui/login", "/ui/", "/ui/jobs", "/ui/nope", "/ui/static/console.css"} {
		p := br.get(path)
		require.Equal(t, console.ContentSecurityPolicy, p.header.Get("Content-Security-Policy"), path)
		require.Equal(t, "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
			"form-action 'self'; base-uri 'none'; frame-ancestors 'none'", p.header.Get("Content-Security-Policy"))
		require.Equal(t, "nosniff", p.header.Get("X-Content-Type-Options"), path)
		require.Equal(t, "DENY", p.header.Get("X-Frame-Options"), path)
		require.Equal(t, "no-referrer", p.header.Get("Referrer-Policy"), path)
	}
	login := br.get("/ui/login")
	require.Equal(t, "no-store", login.header.Get("Cache-Control"))
	require.NotContains(t, login.body, "<script>", "no inline script")
	require.NotContains(t, login.body, "style=", "no inline style")
	js := br.get("/ui/static/htmx.min.js")
	require.Equal(t, http.StatusOK, js.status)
	require.True(t, strings.HasPrefix(js.body, "var htmx=function()"))
	require.Equal(t, "text/javascript; charset=utf-8", js.header.Get("Content-Type"))
	require.Equal(t, http.StatusNotFound, br.get("/ui/static/console.go").status, "only the assets")
	require.Equal(t, http.StatusNotFound, br.get("/ui/nope").status)
	require.Equal(t, http.StatusFound, br.get("/ui").status)
}

// TestCookieSecure: the console's cookies are Secure when the request came
// over TLS or through a proxy that says so (X-Forwarded-Proto: https), or
// always when Config.Secure says so; not on plain HTTP, where a browser
// would refuse them.
func TestCookieSecure(t *testing.T) {
	t.Parallel()
	secure := func(t *testing.T, srv *httptest.Server, header map[string]string) bool {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/ui/login", nil)
		require.NoError(t, err)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Len(t, resp.Cookies(), 1)
		return resp.Cookies()[0].Secure
	}
	serve := func(cfg console.Config, tls bool) *httptest.Server {
		cfg.API, cfg.Logger = http.NotFoundHandler(), quiet
		ui, err := console.New(cfg)
		require.NoError(t, err)
		srv := httptest.NewUnstartedServer(ui)
		if tls {
			srv.StartTLS()
		} else {
			srv.Start()
		}
		t.Cleanup(srv.Close)
		return srv
	}
	plain := serve(console.Config{}, false)
	require.False(t, secure(t, plain, nil))
	require.False(t, secure(t, plain, map[string]string{"X-Forwarded-Proto": "http"}))
	require.True(t, secure(t, plain, map[string]string{"X-Forwarded-Proto": "https"}))
	require.True(t, secure(t, plain, map[string]string{"X-Forwarded-Proto": "HTTPS, http"}), "the first proxy's")
	require.True(t, secure(t, serve(console.Config{}, true), nil))
	require.True(t, secure(t, serve(console.Config{Secure: true}, false), nil))
}

// TestSignIn: pages need a session; the sign-in form needs its CSRF token
// and a key the API knows; the session cookie is sealed, HttpOnly,
// SameSite=Strict and scoped to /ui, and no page contains the key.
func TestSignIn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	br := b.browser(t)
	p := br.get("/ui/jobs")
	require.Equal(t, http.StatusSeeOther, p.status)
	require.Equal(t, "/ui/login", p.header.Get("Location"))
	p = br.do(http.MethodGet, "/ui/live/overview", nil, map[string]string{"HX-Request": "true"})
	require.Equal(t, http.StatusUnauthorized, p.status)
	require.Equal(t, "/ui/login", p.header.Get("HX-Redirect"))

	// No token, a wrong token, an unknown key.
	br.get("/ui/login")
	p = br.post("/ui/login", url.Values{"key": {keyAcme}})
	require.Equal(t, http.StatusForbidden, p.status)
	p = br.post("/ui/login", url.Values{"key": {keyAcme}, "csrf": {"forged"}})
	require.Equal(t, http.StatusForbidden, p.status)
	p = br.signIn("not-a-key")
	require.Equal(t, http.StatusUnauthorized, p.status)
	require.Contains(t, p.body, "The API does not know this key.")
	require.NotContains(t, p.body, "not-a-key")

	p = br.signIn(keyAcme)
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	var sess *http.Cookie
	for _, c := range (&http.Response{Header: p.header}).Cookies() {
		if c.Name == "llmq_session" {
			sess = c
		}
	}
	require.NotNil(t, sess)
	require.True(t, sess.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, sess.SameSite)
	require.Equal(t, "/ui", sess.Path)
	require.NotContains(t, sess.Value, keyAcme)
	for _, path := range []string{"/ui/", "/ui/jobs", "/ui/dead-letters"} {
		p = br.get(path)
		require.Equal(t, http.StatusOK, p.status, path)
		require.NotContains(t, p.body, keyAcme, "no page holds the key")
		require.Contains(t, p.body, `data-who="tenant"`)
	}
	require.Equal(t, http.StatusForbidden, br.get("/ui/batches").status, "batches are an operator's")

	// A tampered cookie is no session.
	u, _ := url.Parse(b.srv.URL + "/ui/")
	br.client.Jar.SetCookies(u, []*http.Cookie{{Name: "llmq_session", Value: sess.Value[:len(sess.Value)-4] + "AAAA", Path: "/ui"}})
	require.Equal(t, http.StatusSeeOther, br.get("/ui/").status)

	// A session ends after its lifetime; signing out ends it at once.
	br = b.browser(t)
	require.Equal(t, http.StatusSeeOther, br.signIn(keyAcme).status)
	require.Equal(t, http.StatusOK, br.get("/ui/").status)
	b.clock.Advance(console.SessionTTLDefault + time.Minute)
	require.Equal(t, http.StatusSeeOther, br.get("/ui/").status)
	br = b.browser(t)
	require.Equal(t, http.StatusSeeOther, br.signIn(keyOps).status)
	home := br.get("/ui/")
	require.Contains(t, home.body, `data-who="operator"`)
	p = br.post("/ui/logout", url.Values{"csrf": {csrf(t, home)}})
	require.Equal(t, http.StatusSeeOther, p.status)
	require.Equal(t, http.StatusSeeOther, br.get("/ui/").status)
}

// TestCSRF: a form without its token, with another session's token, or
// posted from another origin changes nothing; with its token it acts.
func TestCSRF(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueue(t, keyAcme, "a1")
	br := b.browser(t)
	require.Equal(t, http.StatusSeeOther, br.signIn(keyAcme).status)
	other := b.browser(t)
	require.Equal(t, http.StatusSeeOther, other.signIn(keyAcme).status)
	otherToken := csrf(t, other.get("/ui/jobs/a1"))

	p := br.post("/ui/jobs/a1/cancel", url.Values{})
	require.Equal(t, http.StatusForbidden, p.status)
	require.Contains(t, p.body, "CSRF token missing or wrong")
	p = br.post("/ui/jobs/a1/cancel", url.Values{"csrf": {otherToken}})
	require.Equal(t, http.StatusForbidden, p.status, "another session's token")
	token := csrf(t, br.get("/ui/jobs/a1"))
	p = br.do(http.MethodPost, "/ui/jobs/a1/cancel", url.Values{"csrf": {token}}, map[string]string{"Sec-Fetch-Site": "cross-site"})
	require.Equal(t, http.StatusForbidden, p.status, "a cross-site post")
	rec, err := b.store.Jobs().Get(context.Background(), "acme", "a1")
	require.NoError(t, err)
	require.Equal(t, llmq.StatusQueued, rec.Status, "nothing was cancelled")

	p = br.post("/ui/jobs/a1/cancel", url.Values{"csrf": {token}})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	require.Equal(t, "/ui/jobs/a1?done=cancelled", p.header.Get("Location"))
	rec, err = b.store.Jobs().Get(context.Background(), "acme", "a1")
	require.NoError(t, err)
	require.Equal(t, llmq.StatusCancelled, rec.Status)
	require.Contains(t, br.get("/ui/jobs/a1?done=cancelled").body, "The job is cancelled.")
}

// TestTenantIsolation: a tenant's session sees its own jobs only, whatever
// the page is asked; an operator's sees every tenant's.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueue(t, keyAcme, "acme-job")
	b.enqueue(t, keyGlobex, "globex-job")
	acme := b.browser(t)
	require.Equal(t, http.StatusSeeOther, acme.signIn(keyAcme).status)
	for _, path := range []string{"/ui/jobs", "/ui/jobs?tenant=globex", "/ui/jobs?status=queued&tenant=globex"} {
		p := acme.get(path)
		require.Equal(t, http.StatusOK, p.status, path)
		require.Contains(t, p.body, `data-job="acme-job"`, path)
		require.NotContains(t, p.body, "globex-job", path)
	}
	for _, path := range []string{"/ui/jobs/globex-job", "/ui/jobs/globex-job?tenant=globex"} {
		p := acme.get(path)
		require.Equal(t, http.StatusNotFound, p.status, path)
		require.Contains(t, p.body, `no job &#34;globex-job&#34;`)
	}
	ops := b.browser(t)
	require.Equal(t, http.StatusSeeOther, ops.signIn(keyOps).status)
	p := ops.get("/ui/jobs")
	require.Contains(t, p.body, `data-job="acme-job"`)
	require.Contains(t, p.body, `data-job="globex-job"`)
	p = ops.get("/ui/jobs?tenant=globex")
	require.NotContains(t, p.body, `data-job="acme-job"`)
	require.Contains(t, ops.get("/ui/jobs/globex-job?tenant=globex").body, `data-field="status"`)
}

// consoleTenants are the tenants of the console's API: acme's budget is
// read by the usage page only (the store that claims knows no tenants).
var consoleTenants = llmq.Tenants{"acme": {Scope: llmq.Scope{Weight: 3, RPM: 600, TPM: 60000,
	Priority: llmq.PriorityNormal, DailyCost: 5}}}

// TestUsagePage: the usage page shows what GET /v1/usage says, for the
// key's tenant only; an operator sees every tenant. A scope's budgets are
// a table of their own.
func TestUsagePage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for _, j := range []struct{ key, tenant, id string }{{keyAcme, "acme", "u1"}, {keyGlobex, "globex", "u2"}} {
		b.enqueue(t, j.key, j.id)
		stored, err := b.store.Queue().StoreResult(ctx, store.Key{Tenant: j.tenant, ID: j.id},
			store.Result{Response: json.RawMessage(`{}`), PromptTokens: 1200, CompletionTokens: 34})
		require.NoError(t, err)
		require.True(t, stored)
	}
	br := b.browser(t)
	require.Equal(t, http.StatusSeeOther, br.signIn(keyAcme).status)
	p := br.get("/ui/usage")
	require.Equal(t, http.StatusOK, p.status)
	require.Contains(t, p.body, `data-scope="acme/"`)
	require.NotContains(t, p.body, "globex", "another tenant's scope")
	row := p.body[strings.Index(p.body, `data-scope="acme/"`):]
	row = row[:strings.Index(row, "</tr>")]
	require.Contains(t, row, `<td class="num" data-field="weight">3</td>`)
	require.Contains(t, row, `<td>normal</td>`)
	require.Contains(t, row, `data-field="tpm">1,234 <span class="faint">of 60,000 TPM (2.1%)</span>`)
	require.Contains(t, row, `data-field="tokens-today">1,234</td>`)
	row = p.body[strings.Index(p.body, `data-budget="acme//day"`):]
	row = row[:strings.Index(row, "</tr>")]
	require.Contains(t, row, `<td class="num" data-field="limit">$5.00</td>`)
	require.Contains(t, row, `<td class="num" data-field="spent">$0</td>`)
	require.Contains(t, row, `<td class="num" data-field="used">0.0%</td>`)
	require.Contains(t, row, `<span class="badge b-ok" data-field="state">ok</span>`)
	require.Contains(t, row, `<td>queue</td>`)

	ops := b.browser(t)
	require.Equal(t, http.StatusSeeOther, ops.signIn(keyOps).status)
	p = ops.get("/ui/usage")
	require.Contains(t, p.body, `data-scope="acme/"`)
	require.Contains(t, p.body, `data-scope="globex/"`)
}

// TestOverviewCountsPastTheLimit: past store.CountLimitDefault jobs of a
// status, the overview shows the limit with a plus (the API counts no
// further), and the statuses below it exactly.
func TestOverviewCountsPastTheLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.store.Pool().Exec(context.Background(), `INSERT INTO jobs (tenant, id, status, requested_model, body, sched_key)
		SELECT 'acme', 'bulk-' || g, 'queued', 'gpt-4o-mini', '{}', now() FROM generate_series(1, $1::int) g`, store.CountLimitDefault+1)
	require.NoError(t, err)
	b.enqueue(t, keyAcme, "one")
	_, err = b.store.Jobs().Cancel(context.Background(), "acme", "one")
	require.NoError(t, err)
	br := b.browser(t)
	br.signIn(keyAcme)
	p := br.get("/ui/")
	require.Equal(t, http.StatusOK, p.status)
	require.Contains(t, p.body, `data-metric="jobs-queued">10,000+</strong>`)
	require.Contains(t, p.body, `data-metric="jobs-cancelled">1</strong>`)
	require.Contains(t, p.body, `<span data-metric="active">10,000+</span>`)
	require.Contains(t, p.body, `· 10,001+ jobs</span>`)
}

// TestReplayDeadEvents: the dead letters page lists the dead result events
// in scope, and its Replay button, after its dialog, makes every one due
// again, and no other tenant's.
func TestReplayDeadEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for _, k := range []store.Key{{Tenant: "acme", ID: "e1"}, {Tenant: "acme", ID: "e2"}, {Tenant: "globex", ID: "e3"}} {
		j, err := llmq.Decode([]byte(`{"id":"`+k.ID+`","tenant":"`+k.Tenant+`","reply_to":{"to":"replies"},`+
			`"body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}}`), llmq.DecodeOptions{})
		require.NoError(t, err)
		_, err = b.store.Jobs().Insert(ctx, j)
		require.NoError(t, err)
		_, err = b.store.Queue().StoreResult(ctx, k, store.Result{Response: []byte(`{}`), UsedModel: "gpt-4o-mini"})
		require.NoError(t, err)
	}
	ns := b.store.Notifications()
	claimed, err := ns.Claim(ctx, time.Now().Add(time.Minute), time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, claimed, 3)
	dead := map[string]store.Failure{}
	for _, n := range claimed {
		dead[n.EventID] = store.Failure{At: time.Now(), Error: "queue gone", Dead: true}
	}
	require.NoError(t, ns.Settle(ctx, claimed, dead))

	br := b.browser(t)
	require.Equal(t, http.StatusSeeOther, br.signIn(keyAcme).status)
	p := br.get("/ui/dead-letters")
	require.Equal(t, http.StatusOK, p.status)
	require.Equal(t, 2, strings.Count(p.body, "data-dead-event="), "acme's two events, not globex's")
	require.Contains(t, p.body, "queue gone")
	p = br.get("/ui/dead-letters?confirm=replay-events")
	require.Contains(t, p.body, "Replay every dead result event?")
	p = br.post("/ui/dead-letters/replay-events", url.Values{"csrf": {csrf(t, p)}, "return": {"/ui/dead-letters"}})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	require.Equal(t, "/ui/dead-letters?done=events-replayed&n=2", p.header.Get("Location"))
	require.Contains(t, br.get("/ui/dead-letters?done=events-replayed&n=2").body, "Replayed 2 dead result events")
	left, err := ns.List(ctx, store.NotificationFilter{State: store.NotificationDead})
	require.NoError(t, err)
	require.Len(t, left, 1)
	require.Equal(t, "globex", left[0].Tenant)
	require.NotContains(t, br.get("/ui/dead-letters").body, "data-dead-events", "nothing dead in scope: no section")
}

// TestReplayNotification: a job's dead result event shows on its page with
// a Replay button, which makes the event due again and leaves the job as
// it was.
func TestReplayNotification(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	j, err := llmq.Decode([]byte(`{"id":"n1","tenant":"acme","reply_to":{"to":"replies"},"body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}}`),
		llmq.DecodeOptions{})
	require.NoError(t, err)
	_, err = b.store.Jobs().Insert(ctx, j)
	require.NoError(t, err)
	_, err = b.store.Queue().StoreResult(ctx, store.Key{Tenant: "acme", ID: "n1"}, store.Result{Response: []byte(`{}`), UsedModel: "gpt-4o-mini"})
	require.NoError(t, err)
	ns := b.store.Notifications()
	claimed, err := ns.Claim(ctx, time.Now().Add(time.Minute), time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	ev := claimed[0].EventID
	require.NoError(t, ns.Settle(ctx, claimed, map[string]store.Failure{ev: {At: time.Now(), Error: "no route", Dead: true}}))

	br := b.browser(t)
	require.Equal(t, http.StatusSeeOther, br.signIn(keyAcme).status)
	p := br.get("/ui/jobs/n1")
	require.Contains(t, p.body, `data-notification="`+ev+`"`)
	require.Contains(t, p.body, "notification_undeliverable")
	p = br.post("/ui/jobs/n1/notifications/"+ev+"/replay", url.Values{"csrf": {csrf(t, p)}})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	require.Equal(t, "/ui/jobs/n1?done=notification-replayed", p.header.Get("Location"))
	pending, err := ns.List(ctx, store.NotificationFilter{State: store.NotificationPending})
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.Equal(t, ev, pending[0].EventID)
	rec, err := b.store.Jobs().Get(ctx, "acme", "n1")
	require.NoError(t, err)
	require.Equal(t, llmq.StatusSucceeded, rec.Status, "the job is not touched")
	require.Contains(t, br.get("/ui/jobs/n1?done=notification-replayed").body, "The result event is due again")
}
