package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/batchapi"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/app"
	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/store/storetest"
)

// EnvScreenshots names a directory the browser test also writes its
// screenshots to (`make console-screenshots` sets it to docs/console).
const EnvScreenshots = "LLMQ_CONSOLE_SCREENSHOTS"

// The models of the browser test: one that answers, one whose every call
// fails with a 500 (its jobs exhaust their retries and are dead-lettered),
// and one that allows a request a minute (its jobs meet 429s and fall
// back to the one that answers).
const (
	goodModel   = "gpt-4o-mini"
	brokenModel = "gpt-4o-broken"
	busyModel   = "gpt-4o-busy"
)

// pipeline is a running llmq: worker (with its batch lane) and API with the
// console, on a database, an in-memory broker and a simulator of its own.
type pipeline struct {
	base string
}

func startPipeline(t *testing.T) *pipeline {
	t.Helper()
	ctx := context.Background()
	sim := upstreamsim.NewTestServer(t, upstreamsim.Config{
		Seed:    1,
		Latency: upstreamsim.LatencyConfig{TTFT: 20 * time.Millisecond, PerToken: 100 * time.Microsecond},
		Faults: upstreamsim.FaultConfig{Rates: map[upstreamsim.FaultKind]float64{upstreamsim.FaultServerError: 1},
			Models: []string{brokenModel}},
		Models: map[string]upstreamsim.ModelConfig{busyModel: {Limits: upstreamsim.Limits{RPM: 1, TPM: -1}}},
		Batch:  upstreamsim.BatchConfig{TimeScale: 100},
	}, upstreamsim.WithLogger(quiet))
	broker, err := config.ParseBroker("memory://console-" + uuid.NewString()[:8] + "/jobs")
	require.NoError(t, err)
	price := llmq.Model{InputPricePer1M: upstreamsim.InputPerMTokDefault, OutputPricePer1M: upstreamsim.OutputPerMTokDefault}
	s := &config.Config{
		DatabaseURL: storetest.NewDB(t), Broker: broker, OpenAIBaseURL: sim.URL, OpenAIAPIKey: "sk-test",
		Models: map[string]llmq.Model{goodModel: price, brokenModel: price, busyModel: price},
		// The broken model answers 500 to every call: with the incident
		// breaker on, five in a row would hold its lane and its jobs would
		// wait the "outage" out (docs/worker-policy.md); here they spend
		// their attempts, so the console has dead letters to show.
		Retry: config.Retry{MaxAttempts: 2, BaseDelay: 10 * time.Millisecond, MaxDelay: 20 * time.Millisecond,
			IncidentMinCalls: -1},
		Batch:        config.Batch{Window: batchapi.WindowOff, FlushInterval: 300 * time.Millisecond},
		APIKeys:      map[string]string{keyAcme: "acme", keyGlobex: "globex"},
		OperatorKeys: []config.OperatorKey{{Key: keyOps}},
	}
	a, err := app.New(ctx, app.Config{
		Settings: s, Migrate: true, Logger: quiet,
		Worker: &app.WorkerConfig{BatchDrain: func() time.Duration { return time.Hour }, BatchPollInterval: 200 * time.Millisecond,
			ShutdownTimeout: 5 * time.Second},
		API: &app.APIConfig{Listen: "127.0.0.1:0", ConsoleRefresh: time.Second},
	})
	require.NoError(t, err)
	require.NoError(t, a.Start(ctx))
	t.Cleanup(func() { require.NoError(t, a.Stop(context.Background())) })
	return &pipeline{base: "http://" + a.APIAddr().String()}
}

// call asks the JSON API, as any client does, and decodes the answer.
func (p *pipeline) call(t *testing.T, key, method, path, body string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, p.base+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if out != nil {
		require.NoError(t, json.Unmarshal(data, out), "%s", data)
	}
	return resp.StatusCode
}

func jobJSON(id, model, priority string, deferrable bool) string {
	return fmt.Sprintf(`{"id":%q,"priority":%q,"deferrable":%t,"metadata":{"source":"browser-test"},`+
		`"body":{"model":%q,"max_tokens":32,"messages":[{"role":"user","content":"summarise ticket %s"}]}}`,
		id, priority, deferrable, model, id)
}

// chrome finds the browser: Debian's chromium (installed by .ci/run).
func chrome(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium: .ci/run installs it (apt-get install -y chromium)")
	}
	t.Skip("no chromium on this machine: apt-get install -y chromium")
	return ""
}

// tab is a headless browser tab of 1280x800 that records the
// Content-Security-Policy violations of every page it loads.
type tab struct {
	t    *testing.T
	ctx  context.Context
	base string
	dirs []string
}

func newTab(t *testing.T, base string) *tab {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome(t)), chromedp.NoSandbox,
		chromedp.Headless, chromedp.WindowSize(1280, 800), chromedp.Flag("disable-gpu", true),
		chromedp.Flag("hide-scrollbars", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800),
		func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			_, err := cdp.Call(ctx, tg, cdppage.AddScriptToEvaluateOnNewDocument, cdppage.AddScriptToEvaluateOnNewDocumentParams{
				Source: `window.__csp = [];
					document.addEventListener('securitypolicyviolation', e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));`,
			})
			return chromedp.Void{}, err
		}))
	dirs := []string{t.TempDir()}
	if d := os.Getenv(EnvScreenshots); d != "" {
		require.NoError(t, os.MkdirAll(d, 0o755))
		dirs = append(dirs, d)
	}
	return &tab{t: t, ctx: ctx, base: base, dirs: dirs}
}

func (b *tab) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	require.NoError(b.t, chromedp.Do(b.ctx, steps...))
}

// open loads a console page and waits for sel.
func (b *tab) open(path, sel string) {
	b.t.Helper()
	b.do(chromedp.Navigate(b.base+path), chromedp.WaitVisible(chromedp.CSS(sel)))
	b.checkPage(path)
}

// checkPage holds the page to the console's rules: no CSP violation, no
// horizontal scroll at 1280x800.
func (b *tab) checkPage(what string) {
	b.t.Helper()
	violations, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`window.__csp || []`))
	require.NoError(b.t, err)
	require.Empty(b.t, violations, "Content-Security-Policy violations on %s", what)
	fits, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth <= window.innerWidth`))
	require.NoError(b.t, err)
	require.True(b.t, fits, "%s scrolls horizontally at 1280x800", what)
}

func (b *tab) text(sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(b.t, err, sel)
	return strings.TrimSpace(s)
}

func (b *tab) count(sel string) int {
	b.t.Helper()
	n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, sel)))
	require.NoError(b.t, err)
	return n
}

func (b *tab) attrs(sel, attr string) []string {
	b.t.Helper()
	out, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](fmt.Sprintf(
		`Array.from(document.querySelectorAll(%q)).map(e => e.getAttribute(%q))`, sel, attr)))
	require.NoError(b.t, err)
	return out
}

// shot saves a screenshot of the whole page as name.png.
func (b *tab) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	require.NoError(b.t, err)
	require.True(b.t, bytes.HasPrefix(png, []byte("\x89PNG")))
	for _, d := range b.dirs {
		require.NoError(b.t, os.WriteFile(filepath.Join(d, name+".png"), png, 0o644))
	}
}

func (b *tab) signIn(key string) {
	b.t.Helper()
	b.open("/ui/login", "#key")
	b.do(chromedp.SendKeys(chromedp.CSS("#key"), key), chromedp.Submit(chromedp.CSS("#key")),
		chromedp.WaitVisible(chromedp.CSS("#overview")))
}

// callStatuses are the HTTP statuses of calls, as the job page marks them.
func callStatuses(calls []api.Call) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = strconv.Itoa(c.Status)
	}
	return out
}

func n(s string) int64 {
	v, err := strconv.ParseInt(strings.ReplaceAll(s, ",", ""), 10, 64)
	if err != nil {
		panic(fmt.Sprintf("not a number: %q", s))
	}
	return v
}

// TestConsoleInBrowser drives the console in headless Chromium against a
// running API, worker and simulator: each page loads within the CSP and
// without horizontal scroll, its numbers are the API's, the jobs list
// filters, a job opens, a replayed dead letter leaves the list, and a
// tenant cannot see another tenant's job. It saves a screenshot of each
// page (EnvScreenshots).
func TestConsoleInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test: Chromium, Postgres, worker and simulator")
	}
	p := startPipeline(t)
	post := func(key string, bodies ...string) {
		require.Equal(t, http.StatusAccepted, p.call(t, key, http.MethodPost, "/v1/jobs", `{"jobs":[`+strings.Join(bodies, ",")+`]}`, nil))
	}
	var acme []string
	for i, pr := range []string{"high", "normal", "normal", "low", "normal", "high", "normal", "low"} {
		acme = append(acme, jobJSON(fmt.Sprintf("ticket-%03d", i+1), goodModel, pr, false))
	}
	for i := range 3 {
		acme = append(acme, jobJSON(fmt.Sprintf("digest-%03d", i+1), goodModel, "low", true))
	}
	acme = append(acme, jobJSON("invoice-001", brokenModel, "normal", false), jobJSON("invoice-002", brokenModel, "high", false))
	for i := range 3 {
		acme = append(acme, strings.Replace(jobJSON(fmt.Sprintf("report-%03d", i+1), busyModel, "normal", false),
			`"body"`, `"fallback_models":["`+goodModel+`"],"body"`, 1))
	}
	post(keyAcme, acme...)
	post(keyGlobex, jobJSON("globex-001", goodModel, "normal", false), jobJSON("globex-002", goodModel, "high", false),
		jobJSON("globex-003", brokenModel, "low", false))

	// Wait until every job is done and the dead letters are recorded.
	require.Eventually(t, func() bool {
		var c api.JobCounts
		p.call(t, keyOps, http.MethodGet, "/v1/stats/jobs", "", &c)
		var r api.DeadLetterReasons
		p.call(t, keyOps, http.MethodGet, "/v1/dead-letters/reasons", "", &r)
		return c.Total == 19 && c.ByStatus["succeeded"]+c.ByStatus["dead_lettered"] == 19 && r.NotReplayed == 3
	}, 90*time.Second, 200*time.Millisecond, "the jobs finish")
	var counts api.JobCounts
	p.call(t, keyOps, http.MethodGet, "/v1/stats/jobs", "", &counts)
	require.Equal(t, int64(16), counts.ByStatus["succeeded"])
	require.Equal(t, int64(3), counts.ByStatus["dead_lettered"])

	b := newTab(t, p.base)
	b.signIn(keyOps)

	// Overview: the numbers are the API's.
	b.open("/ui/", "#overview")
	for st, want := range counts.ByStatus {
		require.Equal(t, want, n(b.text(`[data-metric="jobs-`+st+`"]`)), "jobs %s", st)
	}
	var queue api.Queue
	p.call(t, keyOps, http.MethodGet, "/v1/queue", "", &queue)
	require.Equal(t, queue.Depth, n(b.text(`[data-metric="queue-depth"]`)))
	require.Equal(t, queue.State, b.text(`[data-metric="backpressure"]`))
	var day api.DeadLetterReasons
	p.call(t, keyOps, http.MethodGet, "/v1/dead-letters/reasons?since="+url.QueryEscape(time.Now().Add(-24*time.Hour).Format(time.RFC3339)), "", &day)
	require.Equal(t, day.Total, n(b.text(`[data-metric="dead-letters-24h"]`)))
	var open api.List[api.Batch]
	p.call(t, keyOps, http.MethodGet, "/v1/batches?open=true", "", &open)
	require.Equal(t, int64(len(open.Data)), n(b.text(`[data-metric="batches-open"]`)))
	// The per-model charts: the window's figures are the API's.
	var models api.ModelStats
	p.call(t, keyOps, http.MethodGet, "/v1/stats/models", "", &models)
	require.Len(t, models.Data, 3, "every model was called")
	for _, m := range models.Data {
		var requests, tokens, limited int64
		for _, mm := range m.Minutes {
			requests, tokens, limited = requests+mm.Requests, tokens+mm.Tokens, limited+mm.RateLimited
		}
		require.Equal(t, requests, n(b.text(`[data-metric="model-`+m.Model+`-requests"]`)), m.Model)
		require.Equal(t, tokens, n(b.text(`[data-metric="model-`+m.Model+`-tokens"]`)), m.Model)
		require.Equal(t, limited, n(b.text(`[data-metric="model-`+m.Model+`-rate-limited"]`)), m.Model)
	}
	// The arrivals chart: the hour's jobs recorded and finished are the
	// API's, and every job of the test is in them.
	var rates api.Arrivals
	p.call(t, keyOps, http.MethodGet, "/v1/stats/arrivals", "", &rates)
	var recorded, succeeded, other int64
	for _, m := range rates.Data {
		recorded, succeeded, other = recorded+m.Recorded, succeeded+m.Succeeded, other+m.OtherFinished
	}
	require.Equal(t, []int64{19, 16, 3}, []int64{recorded, succeeded, other})
	require.Equal(t, recorded, n(b.text(`[data-metric="arrivals-recorded"]`)))
	require.Equal(t, succeeded, n(b.text(`[data-metric="arrivals-succeeded"]`)))
	require.Equal(t, other, n(b.text(`[data-metric="arrivals-other-finished"]`)))
	b.shot("overview")

	// Jobs: every job, newest first; filtered by state.
	var all api.List[api.Job]
	p.call(t, keyOps, http.MethodGet, "/v1/jobs?limit=50", "", &all)
	b.open("/ui/jobs", "[data-jobs]")
	want := make([]string, len(all.Data))
	for i, j := range all.Data {
		want[i] = j.ID
	}
	require.Equal(t, want, b.attrs("tr[data-job]", "data-job"))
	b.shot("jobs")
	b.do(chromedp.SetValue(chromedp.CSS(`select[data-filter="status"]`), "dead_lettered"),
		chromedp.Submit(chromedp.CSS("[data-filters]")), chromedp.WaitVisible(chromedp.CSS(`[data-jobs]`)))
	_, err := chromedp.Run(b.ctx, chromedp.Poll[bool](`location.search.includes("status=dead_lettered")`))
	require.NoError(t, err)
	var dead api.List[api.Job]
	p.call(t, keyOps, http.MethodGet, "/v1/jobs?status=dead_lettered", "", &dead)
	require.Len(t, dead.Data, 3)
	want = want[:0]
	for _, j := range dead.Data {
		want = append(want, j.ID)
	}
	require.Equal(t, want, b.attrs("tr[data-job]", "data-job"))
	b.checkPage("the filtered jobs")

	// A job: its page shows what the API says of it.
	var job api.Job
	p.call(t, keyOps, http.MethodGet, "/v1/jobs/ticket-001?tenant=acme", "", &job)
	require.Equal(t, "succeeded", job.Status)
	b.open("/ui/jobs?tenant=acme", "[data-jobs]")
	b.do(chromedp.Click(chromedp.CSS(`tr[data-job="ticket-001"] a`)), chromedp.WaitVisible(chromedp.CSS(`[data-answer]`)))
	b.checkPage("the job page")
	require.Equal(t, "succeeded", b.text(`[data-field="status"]`))
	require.Equal(t, job.UsedModel, b.text(`[data-field="used_model"]`))
	require.Equal(t, strconv.Itoa(job.Attempts), b.text(`[data-field="attempts"]`))
	require.True(t, strings.HasPrefix(b.text(`[data-field="tokens"]`),
		strconv.Itoa(job.Usage.PromptTokens+job.Usage.CompletionTokens)+" tokens"), b.text(`[data-field="tokens"]`))
	require.Contains(t, b.text(`[data-request]`), `"summarise ticket ticket-001"`)
	require.Equal(t, callStatuses(job.Calls), b.attrs(`tr[data-call] [data-status]`, "data-status"))
	b.shot("job")

	// A job whose calls failed: each call and its answer, as the API says.
	var failed api.Job
	p.call(t, keyOps, http.MethodGet, "/v1/jobs/invoice-001?tenant=acme", "", &failed)
	require.Equal(t, "dead_lettered", failed.Status)
	require.Equal(t, []string{"500", "500"}, callStatuses(failed.Calls), "MaxAttempts calls, each answered 500")
	b.open("/ui/jobs/invoice-001?tenant=acme", "[data-calls]")
	require.Equal(t, callStatuses(failed.Calls), b.attrs(`tr[data-call] [data-status]`, "data-status"))
	require.Equal(t, len(failed.Calls)*2+2, b.count(`[data-events] li`), "queued, each call and its answer, the end")
	b.shot("job-calls")

	// A job the busy model refused with a 429, answered by its fallback.
	var fell api.Job
	for i := 1; i <= 3 && fell.ID == ""; i++ {
		var j api.Job
		p.call(t, keyOps, http.MethodGet, fmt.Sprintf("/v1/jobs/report-%03d?tenant=acme", i), "", &j)
		if slices.Contains(callStatuses(j.Calls), "429") {
			fell = j
		}
	}
	require.NotEmpty(t, fell.ID, "the busy model's one request a minute sent a job a 429")
	require.Equal(t, goodModel, fell.UsedModel)
	b.open("/ui/jobs/"+fell.ID+"?tenant=acme", "[data-calls]")
	require.Equal(t, callStatuses(fell.Calls), b.attrs(`tr[data-call] [data-status]`, "data-status"))
	b.shot("job-fallback")

	// Dead letters: grouped by reason; a replayed letter leaves the list.
	var letters, pending api.List[dlq.View]
	p.call(t, keyOps, http.MethodGet, "/v1/dead-letters?tenant=acme", "", &letters)
	require.Len(t, letters.Data, 2)
	p.call(t, keyOps, http.MethodGet, "/v1/dead-letters", "", &pending)
	require.Len(t, pending.Data, 3)
	b.open("/ui/dead-letters", "[data-letters]")
	require.Equal(t, "3", b.text(`tr[data-group="retries_exhausted"] [data-not-replayed]`))
	b.shot("dead-letters")
	victim := strconv.FormatInt(letters.Data[0].ID, 10)
	b.do(chromedp.Click(chromedp.CSS(`[data-replay="`+victim+`"]`)), chromedp.WaitVisible(chromedp.CSS(`[data-confirm]`)))
	b.checkPage("the replay dialog")
	b.shot("dead-letters-confirm")
	b.do(chromedp.Click(chromedp.CSS(`[data-confirm-button]`)), chromedp.WaitVisible(chromedp.CSS(`[data-notice]`)))
	require.Equal(t, "Replayed 1 dead letter: the jobs are queued again.", b.text(`[data-notice]`))
	require.Zero(t, b.count(`tr[data-letter="`+victim+`"]`), "the replayed letter left the list")
	// The other letters still await theirs (the replayed job may already
	// have failed again: a new letter, with a new id).
	shown := b.attrs(`tr[data-letter]`, "data-letter")
	for _, d := range pending.Data {
		if id := strconv.FormatInt(d.ID, 10); id != victim {
			require.Contains(t, shown, id)
		}
	}
	var after dlq.View
	p.call(t, keyOps, http.MethodGet, "/v1/dead-letters/"+victim, "", &after)
	require.NotNil(t, after.ReplayedAt, "the API says it was replayed")

	// Batches: the open ones and one batch.
	b.open("/ui/batches", "main")
	var batches api.List[api.Batch]
	p.call(t, keyOps, http.MethodGet, "/v1/batches", "", &batches)
	require.Equal(t, len(batches.Data), b.count(`tr[data-batch]`))
	b.shot("batches")
	if len(batches.Data) > 0 {
		b.open("/ui/batches/"+batches.Data[0].ID, `[data-field="status"]`)
		require.Equal(t, strconv.Itoa(batches.Data[0].JobCount), b.text(`[data-field="jobs"]`))
		b.shot("batch")
	}

	// Usage: each scope's figures.
	b.open("/ui/usage", "[data-usage]")
	var usage api.List[api.ScopeUsage]
	p.call(t, keyOps, http.MethodGet, "/v1/usage", "", &usage)
	for _, u := range usage.Data {
		require.Equal(t, u.Today.Tokens, n(b.text(`tr[data-scope="`+u.Tenant+`/`+u.Project+`"] [data-field="tokens-today"]`)), u.Tenant)
	}
	b.shot("usage")

	// A tenant sees its own jobs only.
	g := newTab(t, p.base)
	g.signIn(keyGlobex)
	g.open("/ui/jobs", "[data-jobs]")
	require.Equal(t, []string{"globex-003", "globex-002", "globex-001"}, g.attrs("tr[data-job]", "data-job"))
	g.do(chromedp.Navigate(p.base + "/ui/jobs/ticket-001?tenant=acme"))
	require.Contains(t, g.text("main"), `no job "ticket-001"`)
	require.Zero(t, g.count(`[data-answer]`))
	g.open("/ui/login", "#overview")
}
