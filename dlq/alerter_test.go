package dlq

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

const waitLimit = 5 * time.Second

// request is what a test receiver got.
type request struct {
	method, path, contentType string
	body                      []byte
}

// receiver is an httptest webhook that records every request and answers
// with status (200 unless set).
type receiver struct {
	srv      *httptest.Server
	requests chan request
	count    atomic.Int64
	status   atomic.Int64
	header   http.Header
	hang     chan struct{} // when not nil, handlers wait for it to close
	release  func()        // closes hang once
}

func newReceiver(t *testing.T, hang bool) *receiver {
	t.Helper()
	r := &receiver{requests: make(chan request, 1000), header: http.Header{}}
	r.status.Store(http.StatusOK)
	if hang {
		r.hang = make(chan struct{})
	}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.count.Add(1)
		r.requests <- request{req.Method, req.URL.Path, req.Header.Get("Content-Type"), body}
		if r.hang != nil {
			select {
			case <-r.hang:
			case <-req.Context().Done():
			}
		}
		for k, v := range r.header {
			w.Header()[k] = v
		}
		w.WriteHeader(int(r.status.Load()))
	}))
	t.Cleanup(r.srv.Close)
	if hang {
		r.release = sync.OnceFunc(func() { close(r.hang) })
		t.Cleanup(r.release)
	}
	return r
}

// next returns the next request or fails the test after waitLimit.
func (r *receiver) next(t *testing.T) request {
	t.Helper()
	select {
	case req := <-r.requests:
		return req
	case <-time.After(waitLimit):
		t.Fatal("no request reached the receiver")
		return request{}
	}
}

// logRecords is a slog handler that passes error records to a channel.
type logRecords chan slog.Record

func (l logRecords) Enabled(_ context.Context, lvl slog.Level) bool { return lvl >= slog.LevelError }
func (l logRecords) Handle(_ context.Context, r slog.Record) error  { l <- r.Clone(); return nil }
func (l logRecords) WithAttrs([]slog.Attr) slog.Handler             { return l }
func (l logRecords) WithGroup(string) slog.Handler                  { return l }

func (l logRecords) next(t *testing.T) map[string]string {
	t.Helper()
	select {
	case r := <-l:
		attrs := map[string]string{"msg": r.Message}
		r.Attrs(func(a slog.Attr) bool {
			attrs[a.Key] = a.Value.String()
			return true
		})
		return attrs
	case <-time.After(waitLimit):
		t.Fatal("no error was logged")
		return nil
	}
}

type testBundle struct {
	t       *testing.T
	alerter *Alerter
	clock   *clockwork.FakeClock
	reg     *prometheus.Registry
	logs    logRecords
}

// setup builds and starts an alerter on a virtual clock at t0; cfg names the
// sinks. Stop runs in cleanup.
func setup(t *testing.T, cfg AlertConfig) *testBundle {
	t.Helper()
	b := &testBundle{t: t, clock: clockwork.NewFakeClockAt(t0), reg: prometheus.NewPedanticRegistry(), logs: make(logRecords, 100)}
	cfg.Clock = b.clock
	cfg.Registerer = b.reg
	cfg.Logger = slog.New(b.logs)
	a, err := NewAlerter(cfg)
	require.NoError(t, err)
	b.alerter = a
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		require.NoError(t, a.Stop(ctx))
	})
	return b
}

func (b *testBundle) start(t *testing.T) {
	t.Helper()
	require.NoError(t, b.alerter.Start(context.Background()))
}

// waitTimers waits until clock has at least n pending timers (so the
// goroutine under test is parked on them) and fails the test after waitLimit.
func waitTimers(t *testing.T, clock *clockwork.FakeClock, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	require.NoError(t, clock.BlockUntilContext(ctx, n), "waiting for %d pending timers", n)
}

// counterValue reads one counter.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}

// gather returns every counter of reg as name{label="value",...} -> value.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			name := f.GetName()
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			out[name] = m.GetCounter().GetValue()
		}
	}
	return out
}

func (b *testBundle) sent(sink string, state alertState) float64 {
	return counterValue(b.t, b.alerter.sent.WithLabelValues(sink, string(state)))
}

func (b *testBundle) failed(sink string) float64 {
	return counterValue(b.t, b.alerter.failed.WithLabelValues(sink))
}

func TestAlerterBurstOfHundredGivesOneAlertAndOneResolved(t *testing.T) {
	t.Parallel()
	recv := newReceiver(t, false)
	b := setup(t, AlertConfig{WebhookURL: recv.srv.URL + "/hook", HTTPClient: recv.srv.Client()})
	b.start(t)

	for i := range 100 {
		b.alerter.Notify(deadLetter(fmt.Sprintf("job-%03d", i), "acme", ReasonRetriesExhausted))
	}
	waitTimers(t, b.clock, 1) // the burst's group wait, armed before the clock moves
	b.clock.Advance(AlertGroupWaitDefault)
	firing := recv.next(t)
	require.Equal(t, "/hook", firing.path)
	var msg webhookMessage
	require.NoError(t, json.Unmarshal(firing.body, &msg))
	require.Equal(t, "[FIRING] 100 jobs of tenant acme dead-lettered (retries_exhausted)", msg.Text)

	// Nothing more until the burst has been quiet for ResolveTimeout.
	waitTimers(t, b.clock, 1) // the resolve timer, ResolveTimeout-GroupWait from now
	b.clock.Advance(AlertResolveTimeoutDefault - AlertGroupWaitDefault - time.Nanosecond)
	waitTimers(t, b.clock, 1) // still pending, 1ns from now
	b.clock.Advance(time.Nanosecond)
	resolved := recv.next(t)
	require.NoError(t, json.Unmarshal(resolved.body, &msg))
	require.Equal(t, "[RESOLVED] dead letters stopped: 100 jobs of tenant acme dead-lettered (retries_exhausted)", msg.Text)

	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	require.NoError(t, b.alerter.Stop(ctx))
	require.EqualValues(t, 2, recv.count.Load())
	require.Equal(t, 1.0, b.sent(SinkWebhook, stateFiring))
	require.Equal(t, 1.0, b.sent(SinkWebhook, stateResolved))
	require.Equal(t, 0.0, b.failed(SinkWebhook))
	require.Equal(t, 0.0, counterValue(t, b.alerter.dropped))
}

func TestAlerterAlertmanagerPayload(t *testing.T) {
	t.Parallel()
	am := newReceiver(t, false)
	hook := newReceiver(t, false)
	b := setup(t, AlertConfig{
		AlertmanagerURL: am.srv.URL + "/",
		WebhookURL:      hook.srv.URL + "/services/T0/B0/x",
		Severity:        "critical",
		HTTPClient:      am.srv.Client(),
	})
	b.start(t)
	for _, id := range []string{"j1", "j2", "j3"} {
		b.alerter.Notify(Event{JobID: id, Tenant: "acme", Reason: ReasonRetriesExhausted, LastError: "429 Too Many Requests", Model: "gpt-4o-mini", Time: t0})
	}
	waitTimers(t, b.clock, 1) // the burst's group wait, armed before the clock moves
	b.clock.Advance(10 * time.Second)

	const description = "3 dead letters with reason retries_exhausted for tenant acme between 2026-11-30T02:00:00Z and 2026-11-30T02:00:00Z. " +
		"Models: gpt-4o-mini. Sample job ids: j1, j2, j3. Last error: 429 Too Many Requests"
	firing := am.next(t)
	require.Equal(t, http.MethodPost, firing.method)
	require.Equal(t, "/api/v2/alerts", firing.path)
	require.Equal(t, "application/json", firing.contentType)
	require.JSONEq(t, `[{
		"labels": {"alertname": "LLMQDeadLetters", "severity": "critical", "reason": "retries_exhausted", "tenant": "acme"},
		"annotations": {
			"summary": "3 jobs of tenant acme dead-lettered (retries_exhausted)",
			"description": "`+description+`"
		},
		"startsAt": "2026-11-30T02:00:00Z",
		"endsAt": "2026-11-30T02:10:00Z"
	}]`, string(firing.body))

	hookFiring := hook.next(t)
	require.Equal(t, "/services/T0/B0/x", hookFiring.path)
	require.JSONEq(t, `{
		"text": "[FIRING] 3 jobs of tenant acme dead-lettered (retries_exhausted)",
		"blocks": [
			{"type": "header", "text": {"type": "plain_text", "text": "[FIRING] 3 jobs of tenant acme dead-lettered (retries_exhausted)"}},
			{"type": "section", "text": {"type": "mrkdwn", "text": "`+description+`"}},
			{"type": "context", "elements": [{"type": "mrkdwn", "text": "alertname=LLMQDeadLetters severity=critical reason=retries_exhausted tenant=acme"}]}
		]
	}`, string(hookFiring.body))

	waitTimers(t, b.clock, 1) // the resolve timer, 4m50s from now
	b.clock.Advance(4*time.Minute + 50*time.Second)
	resolved := am.next(t)
	require.JSONEq(t, `[{
		"labels": {"alertname": "LLMQDeadLetters", "severity": "critical", "reason": "retries_exhausted", "tenant": "acme"},
		"annotations": {
			"summary": "dead letters stopped: 3 jobs of tenant acme dead-lettered (retries_exhausted)",
			"description": "`+description+`"
		},
		"startsAt": "2026-11-30T02:00:00Z",
		"endsAt": "2026-11-30T02:05:00Z"
	}]`, string(resolved.body))
	hook.next(t)

	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	require.NoError(t, b.alerter.Stop(ctx))
	for _, sink := range []string{SinkAlertmanager, SinkWebhook} {
		require.Equal(t, 1.0, b.sent(sink, stateFiring), sink)
		require.Equal(t, 1.0, b.sent(sink, stateResolved), sink)
	}
	require.Equal(t, map[string]float64{
		"llmq_alerts_dropped_total":                                    0,
		`llmq_alerts_failed_total{sink="alertmanager"}`:                0,
		`llmq_alerts_failed_total{sink="webhook"}`:                     0,
		`llmq_alerts_sent_total{sink="alertmanager",state="firing"}`:   1,
		`llmq_alerts_sent_total{sink="alertmanager",state="resolved"}`: 1,
		`llmq_alerts_sent_total{sink="webhook",state="firing"}`:        1,
		`llmq_alerts_sent_total{sink="webhook",state="resolved"}`:      1,
	}, gather(t, b.reg))
}

func TestAlerterReceiverDownRetriesThenLogs(t *testing.T) {
	t.Parallel()
	recv := newReceiver(t, false)
	recv.status.Store(http.StatusServiceUnavailable)
	b := setup(t, AlertConfig{WebhookURL: recv.srv.URL, HTTPClient: recv.srv.Client(), MaxAttempts: 4})
	b.start(t)

	b.alerter.Notify(deadLetter("j1", "acme", ReasonPoison))
	waitTimers(t, b.clock, 1) // the burst's group wait, armed before the clock moves
	b.clock.Advance(10 * time.Second)
	// Attempts 1..4 with backoffs of 1s, 2s and 4s between them; the
	// resolve timer of the burst runs alongside.
	resolveIn := AlertResolveTimeoutDefault - 10*time.Second
	for attempt, backoff := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		recv.next(t)
		waitTimers(t, b.clock, 2) // the resolve timer (resolveIn) and the backoff
		require.EqualValues(t, attempt+1, recv.count.Load())
		b.clock.Advance(backoff)
		resolveIn -= backoff
	}
	recv.next(t)
	rec := b.logs.next(t)
	require.Equal(t, "dlq: alert not delivered", rec["msg"])
	require.Equal(t, "webhook", rec["sink"])
	require.Equal(t, "firing", rec["state"])
	require.Equal(t, "4", rec["attempts"])
	require.Contains(t, rec["error"], "answered 503")

	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	require.NoError(t, b.alerter.Stop(ctx))
	require.EqualValues(t, 4, recv.count.Load())
	require.Equal(t, 1.0, b.failed(SinkWebhook))
	require.Equal(t, 0.0, b.sent(SinkWebhook, stateFiring))
}

func TestAlerterHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	recv := newReceiver(t, false)
	recv.status.Store(http.StatusTooManyRequests)
	recv.header.Set("Retry-After", "7")
	b := setup(t, AlertConfig{WebhookURL: recv.srv.URL, HTTPClient: recv.srv.Client(), MaxAttempts: 2})
	b.start(t)
	b.alerter.Notify(deadLetter("j1", "acme", ReasonPoison))
	waitTimers(t, b.clock, 1) // the burst's group wait, armed before the clock moves
	b.clock.Advance(10 * time.Second)
	recv.next(t)
	waitTimers(t, b.clock, 2) // the resolve timer and the 7s Retry-After
	b.clock.Advance(7 * time.Second)
	recv.next(t)
	require.Equal(t, "2", b.logs.next(t)["attempts"])
	require.Equal(t, 1.0, b.failed(SinkWebhook))
}

func TestAlerterPermanentErrorIsNotRetried(t *testing.T) {
	t.Parallel()
	recv := newReceiver(t, false)
	recv.status.Store(http.StatusBadRequest)
	b := setup(t, AlertConfig{WebhookURL: recv.srv.URL, HTTPClient: recv.srv.Client()})
	b.start(t)
	b.alerter.Notify(deadLetter("j1", "acme", ReasonPoison))
	waitTimers(t, b.clock, 1) // the burst's group wait, armed before the clock moves
	b.clock.Advance(10 * time.Second)
	recv.next(t)
	rec := b.logs.next(t)
	require.Equal(t, "1", rec["attempts"])
	require.Contains(t, rec["error"], "answered 400")
	waitTimers(t, b.clock, 1) // the resolve timer only: no retry
	require.EqualValues(t, 1, recv.count.Load())
	require.Equal(t, 1.0, b.failed(SinkWebhook))
}

// countingTransport counts round trips.
type countingTransport struct {
	base http.RoundTripper
	n    atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.base.RoundTrip(r)
}

func TestAlerterUnreachableReceiver(t *testing.T) {
	t.Parallel()
	// A port nobody listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())

	tr := &countingTransport{base: &http.Transport{}}
	b := setup(t, AlertConfig{
		AlertmanagerURL: "http://" + addr,
		HTTPClient:      &http.Client{Transport: tr},
		MaxAttempts:     3,
		RetryBackoff:    time.Second,
		RetryMaxBackoff: 1500 * time.Millisecond,
	})
	b.start(t)
	b.alerter.Notify(deadLetter("j1", "acme", ReasonPoison))
	waitTimers(t, b.clock, 1) // the burst's group wait, armed before the clock moves
	b.clock.Advance(10 * time.Second)
	resolveIn := AlertResolveTimeoutDefault - 10*time.Second
	for _, backoff := range []time.Duration{time.Second, 1500 * time.Millisecond} {
		waitTimers(t, b.clock, 2) // the resolve timer (resolveIn) and the backoff
		b.clock.Advance(backoff)
		resolveIn -= backoff
	}
	rec := b.logs.next(t)
	require.Equal(t, "alertmanager", rec["sink"])
	require.Equal(t, "3", rec["attempts"])
	require.Contains(t, rec["error"], "connection refused")
	require.EqualValues(t, 3, tr.n.Load())
	require.Equal(t, 1.0, b.failed(SinkAlertmanager))
}

// TestAlerterWebhookSecretNeverLogged: the path of a webhook URL is its
// secret; a failed delivery and a bad configuration name its host only.
func TestAlerterWebhookSecretNeverLogged(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	const secret = "T0AAA/B0BBB/XXXXSECRETXXXX"
	b := setup(t, AlertConfig{WebhookURL: "http://" + addr + "/services/" + secret, MaxAttempts: 1})
	b.start(t)
	b.alerter.Notify(deadLetter("j1", "acme", ReasonPoison))
	waitTimers(t, b.clock, 1) // the burst's group wait, armed before the clock moves
	b.clock.Advance(10 * time.Second)
	rec := b.logs.next(t)
	require.Contains(t, rec["error"], "connection refused")
	require.Contains(t, rec["error"], "http://"+addr+"/…")
	for k, v := range rec {
		require.NotContains(t, v, "SECRET", k)
	}
	for _, bad := range []string{"ftp://hooks.example/services/" + secret, "http:///services/" + secret, "http://h:bad/services/" + secret} {
		_, err := NewAlerter(AlertConfig{WebhookURL: bad})
		require.ErrorIs(t, err, ErrInvalidConfig)
		require.NotContains(t, err.Error(), "SECRET", bad)
	}
}

// TestAlerterSlackEscaping: text from outside (a model name, a tenant's job
// id, an upstream error) cannot mention a channel or make a link in Slack,
// and a credential in an upstream error does not reach the channel.
func TestAlerterSlackEscaping(t *testing.T) {
	t.Parallel()
	hook := newReceiver(t, false)
	b := setup(t, AlertConfig{WebhookURL: hook.srv.URL + "/hook"})
	b.start(t)
	b.alerter.Notify(Event{JobID: "<@U0ADMIN>", Tenant: "acme", Reason: ReasonRetriesExhausted, Model: "<!channel> gpt",
		LastError: "<https://evil.example/login|Click to re-authenticate> & Authorization: Bearer sk-live0123456789", Time: t0})
	waitTimers(t, b.clock, 1) // the burst's group wait, armed before the clock moves
	b.clock.Advance(10 * time.Second)
	var msg webhookMessage
	require.NoError(t, json.Unmarshal(hook.next(t).body, &msg))
	texts := []string{msg.Text, msg.Blocks[1].Text.Text, msg.Blocks[2].Elements[0].Text}
	for _, text := range texts {
		require.NotContains(t, text, "<", text)
		require.NotContains(t, text, ">", text)
		require.NotContains(t, text, "sk-live", text)
	}
	require.Contains(t, msg.Blocks[1].Text.Text, "Models: &lt;!channel&gt; gpt.")
	require.Contains(t, msg.Blocks[1].Text.Text, "Sample job ids: &lt;@U0ADMIN&gt;.")
	require.Contains(t, msg.Blocks[1].Text.Text, "&lt;https://evil.example/login|Click to re-authenticate&gt; &amp; Authorization: xxxxx")
}

func TestAlerterNotifyNeverBlocks(t *testing.T) {
	t.Parallel()
	recv := newReceiver(t, true)
	b := setup(t, AlertConfig{WebhookURL: recv.srv.URL, HTTPClient: recv.srv.Client(), BufferSize: 8, GroupWait: -1})

	// Not started: the buffer takes 8, the rest is dropped and counted.
	for i := range 20 {
		b.alerter.Notify(deadLetter(fmt.Sprint(i), "acme", ReasonPoison))
	}
	require.Equal(t, 12.0, counterValue(t, b.alerter.dropped))

	// Started with a receiver that hangs: Notify still returns at once.
	b.start(t)
	recv.next(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 10_000 {
			b.alerter.Notify(deadLetter(fmt.Sprint("x", i), "acme", ReasonPoison))
		}
	}()
	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatal("Notify blocked")
	}
	recv.release()
}

func TestAlerterStopFlushesPending(t *testing.T) {
	t.Parallel()
	recv := newReceiver(t, false)
	b := setup(t, AlertConfig{WebhookURL: recv.srv.URL, HTTPClient: recv.srv.Client()})
	b.start(t)
	for _, id := range []string{"a", "b", "c"} {
		b.alerter.Notify(deadLetter(id, "acme", ReasonExpired))
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	require.NoError(t, b.alerter.Stop(ctx))
	require.EqualValues(t, 1, recv.count.Load())
	var msg webhookMessage
	require.NoError(t, json.Unmarshal(recv.next(t).body, &msg))
	require.Equal(t, "[FIRING] 3 jobs of tenant acme dead-lettered (expired)", msg.Text)
	require.NoError(t, b.alerter.Stop(ctx), "second Stop")
}

func TestAlerterStopGivesUpAtContextEnd(t *testing.T) {
	t.Parallel()
	recv := newReceiver(t, true)
	b := setup(t, AlertConfig{WebhookURL: recv.srv.URL, HTTPClient: recv.srv.Client()})
	b.start(t)
	b.alerter.Notify(deadLetter("a", "acme", ReasonPoison))
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- b.alerter.Stop(ctx) }()
	recv.next(t) // the flushed notification is in flight and hangs
	cancel()
	select {
	case err := <-stopped:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(waitLimit):
		t.Fatal("Stop did not return")
	}
	require.Equal(t, "1", b.logs.next(t)["attempts"])
	require.Equal(t, 1.0, b.failed(SinkWebhook))
}

func TestAlerterStartTwiceAndStopUnstarted(t *testing.T) {
	t.Parallel()
	a, err := NewAlerter(AlertConfig{WebhookURL: "http://127.0.0.1:1/"})
	require.NoError(t, err)
	require.NoError(t, a.Stop(context.Background()), "Stop before Start")
	b := setup(t, AlertConfig{WebhookURL: "http://127.0.0.1:1/"})
	b.start(t)
	require.ErrorIs(t, b.alerter.Start(context.Background()), ErrAlreadyStarted)
}

func TestAlerterStartContextCancelStops(t *testing.T) {
	t.Parallel()
	b := setup(t, AlertConfig{WebhookURL: "http://127.0.0.1:1/"})
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, b.alerter.Start(ctx))
	cancel()
	select {
	case <-b.alerter.done:
	case <-time.After(waitLimit):
		t.Fatal("alerter did not stop")
	}
}

func TestAlerterMetricsRegisterOnce(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	_, err := NewAlerter(AlertConfig{WebhookURL: "http://127.0.0.1:1/", Registerer: reg})
	require.NoError(t, err)
	_, err = NewAlerter(AlertConfig{WebhookURL: "http://127.0.0.1:1/", Registerer: reg})
	var already prometheus.AlreadyRegisteredError
	require.ErrorAs(t, err, &already)
}

func TestAlertConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cfg   AlertConfig
		field string
	}{
		{"no sink", AlertConfig{}, "AlertmanagerURL"},
		{"unparsable", AlertConfig{WebhookURL: "://nope"}, "WebhookURL"},
		{"not http", AlertConfig{AlertmanagerURL: "ftp://am:9093"}, "AlertmanagerURL"},
		{"no host", AlertConfig{WebhookURL: "http:///hook"}, "WebhookURL"},
		{"resolve before group wait", AlertConfig{WebhookURL: "http://h/", GroupWait: time.Minute, ResolveTimeout: time.Minute}, "ResolveTimeout"},
		{"negative interval", AlertConfig{WebhookURL: "http://h/", GroupInterval: -time.Second}, "GroupInterval"},
		{"rate", AlertConfig{WebhookURL: "http://h/", MaxPerMinute: -2}, "MaxPerMinute"},
		{"buffer", AlertConfig{WebhookURL: "http://h/", BufferSize: -1}, "BufferSize"},
		{"samples", AlertConfig{WebhookURL: "http://h/", SampleSize: -1}, "SampleSize"},
		{"attempts", AlertConfig{WebhookURL: "http://h/", MaxAttempts: -1}, "MaxAttempts"},
		{"backoff", AlertConfig{WebhookURL: "http://h/", RetryBackoff: -time.Second}, "RetryBackoff"},
		{"max backoff", AlertConfig{WebhookURL: "http://h/", RetryBackoff: time.Minute, RetryMaxBackoff: time.Second}, "RetryMaxBackoff"},
		{"send timeout", AlertConfig{WebhookURL: "http://h/", SendTimeout: -time.Second}, "SendTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewAlerter(tc.cfg)
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.Contains(t, err.Error(), tc.field+":")
		})
	}
}

func TestAlertConfigDefaults(t *testing.T) {
	t.Parallel()
	c := AlertConfig{GroupWait: -1}.WithDefaults()
	require.Equal(t, time.Duration(0), c.GroupWait)
	require.Equal(t, AlertGroupIntervalDefault, c.GroupInterval)
	require.Equal(t, AlertResolveTimeoutDefault, c.ResolveTimeout)
	require.Equal(t, AlertMaxPerMinuteDefault, c.MaxPerMinute)
	require.Equal(t, AlertBufferSizeDefault, c.BufferSize)
	require.Equal(t, AlertMaxAttemptsDefault, c.MaxAttempts)
	require.Equal(t, AlertSendTimeoutDefault, c.HTTPClient.Timeout)
	require.Equal(t, AlertSeverityDefault, c.Severity)
	require.Equal(t, clockwork.NewRealClock(), c.Clock)
}
