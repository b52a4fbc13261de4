package worker_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/chaos"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/internal/webhook"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/rabbitmq"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
	"github.com/llmq/llmq/worker"
)

// replyQueue declares a reply queue as an RPC client does with amqp091
// (server-named, exclusive, auto-delete) and returns its name and
// deliveries.
func replyQueue(t *testing.T) (string, <-chan amqp.Delivery) {
	t.Helper()
	conn, err := amqp.Dial(rabbitmqtest.URL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	require.NoError(t, err)
	ds, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	require.NoError(t, err)
	return q.Name, ds
}

func nextReply(t *testing.T, ds <-chan amqp.Delivery) amqp.Delivery {
	t.Helper()
	return next(t, ds, "reply")
}

// next is the next value on c, failing t after 30 s without one (what
// names it).
func next[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s after 30s", what)
		var zero T
		return zero
	}
}

// TestNotifierRabbitMQReplies: jobs published with the AMQP reply_to and
// correlation_id properties get their result event on that queue, with
// the correlation id and the event id as message id, once per job.
func TestNotifierRabbitMQReplies(t *testing.T) {
	t.Parallel()
	const n = 40
	tb := setup(t, upstreamsim.Config{Seed: 3, Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: -1, TPM: -1}}})
	w, err := worker.New(worker.Config{
		Subscriber: tb.subscriber(t, 64), Store: tb.store.Queue(), DeadLetters: tb.letters,
		Upstream: upstreamAt(tb.sim.URL, 10*time.Second), Strategy: shaping.StrategyRetry,
		Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry(),
	})
	require.NoError(t, err)
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(ctx))
	})
	replier, ok := tb.pub.(transport.Replier)
	require.True(t, ok, "the RabbitMQ publisher replies")
	nt, err := worker.NewNotifier(worker.NotifierConfig{Outbox: tb.store.Notifications(), Replier: replier,
		Interval: 10 * time.Millisecond, Log: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	require.NoError(t, nt.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, nt.Stop(context.Background())) })

	queue, ds := replyQueue(t)
	msgs := make([]transport.Message, n)
	for i := range n {
		id := fmt.Sprintf("rpc-%02d", i)
		msgs[i] = transport.Message{Value: jobJSON(id, "gpt-4o-mini", ""), ReplyTo: queue, CorrelationID: "corr-" + id,
			Headers: map[string]string{"x-app": "a" + id}}
	}
	require.NoError(t, tb.pub.Publish(context.Background(), tb.queue, msgs...))
	seen := map[string]string{} // job id -> event id
	for len(seen) < n {
		d := nextReply(t, ds)
		var e llmq.ResultEvent
		require.NoError(t, json.Unmarshal(d.Body, &e))
		require.Equal(t, llmq.ResultEventType, e.Type)
		require.Equal(t, llmq.StatusSucceeded, e.Status)
		require.Equal(t, "corr-"+e.JobID, d.CorrelationId)
		require.Equal(t, "corr-"+e.JobID, e.CorrelationID)
		require.Equal(t, e.EventID, d.MessageId)
		require.Equal(t, "a"+e.JobID, d.Headers["x-app"], "the job message's headers are echoed")
		require.NotEmpty(t, e.Response)
		require.Equal(t, e.Usage.PromptTokens+e.Usage.CompletionTokens, e.Usage.TotalTokens)
		if prev, ok := seen[e.JobID]; ok {
			require.Equal(t, prev, e.EventID, "a duplicate carries the same event id")
		}
		seen[e.JobID] = e.EventID
	}
}

// notifierBundle is a store with one finished job with a route, and a
// notifier on a fake clock whose rounds the test runs.
type notifierBundle struct {
	store *store.Store
	clock *clockwork.FakeClock
	pub   transport.Replier
	ctx   context.Context
}

func (b *notifierBundle) finish(t *testing.T, id string, reply *llmq.Reply) {
	t.Helper()
	j, err := llmq.Decode(jobJSON(id, "gpt-4o-mini", ""), llmq.DecodeOptions{})
	require.NoError(t, err)
	j.ReplyTo = reply
	_, err = b.store.Jobs().Insert(b.ctx, j)
	require.NoError(t, err)
	stored, err := b.store.Queue().StoreResult(b.ctx, store.Key{Tenant: j.Tenant, ID: id}, store.Result{Response: []byte(`{"id":"c"}`), UsedModel: "gpt-4o-mini"})
	require.NoError(t, err)
	require.True(t, stored)
}

func (b *notifierBundle) notifier(t *testing.T, cfg worker.NotifierConfig) *worker.Notifier {
	t.Helper()
	cfg.Outbox, cfg.Replier, cfg.Clock, cfg.Log = b.store.Notifications(), b.pub, b.clock, slog.New(slog.DiscardHandler)
	n, err := worker.NewNotifier(cfg)
	require.NoError(t, err)
	return n
}

func (b *notifierBundle) only(t *testing.T) *store.Notification {
	t.Helper()
	ns := b.left(t)
	require.Len(t, ns, 1)
	return ns[0]
}

// left lists the notifications not delivered.
func (b *notifierBundle) left(t *testing.T) []*store.Notification {
	t.Helper()
	ns, err := b.store.Notifications().List(b.ctx, store.NotificationFilter{})
	require.NoError(t, err)
	return ns
}

func setupNotifier(t *testing.T) *notifierBundle {
	t.Helper()
	tb := setup(t, upstreamsim.Config{})
	r, ok := tb.pub.(transport.Replier)
	require.True(t, ok)
	return &notifierBundle{store: tb.store, clock: clockwork.NewFakeClockAt(time.Now().Add(time.Second)), pub: r, ctx: context.Background()}
}

// TestNotifierCrashAndOutage: a notifier killed right after its claim
// committed publishes nothing; once its lease passes another delivers the
// event. A reply queue that does not exist yet (the broker cannot route)
// delays the event with backoff; it arrives once the queue exists.
func TestNotifierCrashAndOutage(t *testing.T) {
	t.Parallel()
	b := setupNotifier(t)
	queue := rabbitmqtest.NewQueue(t)
	b.finish(t, "late", &llmq.Reply{To: queue, CorrelationID: "c1"})

	dead := b.notifier(t, worker.NotifierConfig{Lease: time.Minute})
	dead.CrashAfterClaim(func() bool { return true })
	dead.Round(b.ctx)
	require.Equal(t, 1, b.only(t).Attempts)

	n := b.notifier(t, worker.NotifierConfig{Lease: time.Minute, BackoffMin: 10 * time.Second})
	n.Round(b.ctx)
	require.Equal(t, 1, b.only(t).Attempts, "held by the killed notifier until its lease passes")
	b.clock.Advance(time.Minute)
	n.Round(b.ctx)
	got := b.only(t)
	require.Equal(t, 2, got.Attempts)
	require.Contains(t, got.LastError, transport.ErrUnroutable.Error(), "no queue yet: not lost, retried")

	conn, err := amqp.Dial(rabbitmqtest.URL())
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclare(queue, false, false, false, false, nil)
	require.NoError(t, err)
	b.clock.Advance(19 * time.Second) // the second attempt's backoff: 2 x 10 s
	n.Round(b.ctx)
	require.Equal(t, 2, b.only(t).Attempts, "not due before its backoff")
	b.clock.Advance(time.Second)
	n.Round(b.ctx)
	require.Empty(t, b.left(t), "delivered")
	d, ok, err := ch.Get(queue, true)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, got.EventID, d.MessageId)
	require.Equal(t, "c1", d.CorrelationId)
	_, ok, err = ch.Get(queue, true)
	require.NoError(t, err)
	require.False(t, ok, "delivered once")
}

// TestNotifierDeadAndReplay: a notification undeliverable for its retry
// period ends dead (notification_undeliverable) and its job stays
// succeeded; a replay sends the same event again, and not the job.
func TestNotifierDeadAndReplay(t *testing.T) {
	t.Parallel()
	b := setupNotifier(t)
	queue := rabbitmqtest.NewQueue(t)
	b.finish(t, "gone", &llmq.Reply{To: queue})
	n := b.notifier(t, worker.NotifierConfig{RetryFor: time.Minute, BackoffMin: 20 * time.Second, BackoffMax: 20 * time.Second})
	for range 3 {
		n.Round(b.ctx)
		b.clock.Advance(20 * time.Second)
	}
	got := b.only(t)
	require.NotNil(t, got.DeadAt)
	require.Equal(t, store.NotificationUndeliverable, got.DeadReason)
	require.Equal(t, 3, got.Attempts)
	rec, err := b.store.Jobs().Get(b.ctx, llmq.DefaultTenant, "gone")
	require.NoError(t, err)
	require.Equal(t, llmq.StatusSucceeded, rec.Status)

	conn, err := amqp.Dial(rabbitmqtest.URL())
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclare(queue, false, false, false, false, nil)
	require.NoError(t, err)
	_, err = b.store.Notifications().Replay(b.ctx, llmq.DefaultTenant, got.EventID, b.clock.Now())
	require.NoError(t, err)
	n.Round(b.ctx)
	require.Empty(t, b.left(t), "delivered")
	d, ok, err := ch.Get(queue, true)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, got.EventID, d.MessageId)
	rec, err = b.store.Jobs().Get(b.ctx, llmq.DefaultTenant, "gone")
	require.NoError(t, err)
	require.Equal(t, llmq.StatusSucceeded, rec.Status, "a replay re-sends the event, never the job")
}

// TestNotifierWebhookFailingHalfTheTime: a webhook receiver that fails
// every other request still gets every job's result event, signed (the
// Standard Webhooks library verifies each), and every duplicate carries
// the event id of the first.
func TestNotifierWebhookFailingHalfTheTime(t *testing.T) {
	t.Parallel()
	const n = 30
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("a secret of twenty-four b"))
	verifier, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	var calls atomic.Int64
	var mu sync.Mutex
	events := map[string][]string{} // job id -> event ids received
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := verifier.Verify(body, r.Header); err != nil {
			t.Errorf("signature: %v", err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var e llmq.ResultEvent
		if err := json.Unmarshal(body, &e); err != nil {
			t.Errorf("event: %v", err)
			return
		}
		if e.EventID != r.Header.Get("webhook-id") {
			t.Errorf("event id %s, webhook-id %s", e.EventID, r.Header.Get("webhook-id"))
		}
		mu.Lock()
		events[e.JobID] = append(events[e.JobID], e.EventID)
		mu.Unlock()
		if calls.Add(1)%2 == 0 {
			w.WriteHeader(http.StatusServiceUnavailable) // received, but answered as failed: sent again
		}
	}))
	defer srv.Close()
	hooks, err := webhook.New(webhook.Config{Secrets: map[string][]string{llmq.DefaultTenant: {secret}}, AllowPrivate: true,
		TLS: srv.Client().Transport.(*http.Transport).TLSClientConfig})
	require.NoError(t, err)
	defer hooks.CloseIdleConnections()

	b := setupNotifier(t)
	for i := range n {
		b.finish(t, fmt.Sprintf("hook-%02d", i), &llmq.Reply{Webhook: srv.URL + "/results"})
	}
	nt := b.notifier(t, worker.NotifierConfig{Webhooks: hooks, Batch: 8, BackoffMin: time.Second, BackoffMax: time.Second})
	for round := 0; ; round++ {
		require.Less(t, round, 50, "not every event delivered")
		nt.Round(b.ctx)
		pending, err := b.store.Notifications().List(b.ctx, store.NotificationFilter{State: store.NotificationPending})
		require.NoError(t, err)
		if len(pending) == 0 {
			break
		}
		b.clock.Advance(time.Second)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, events, n, "every job's event arrived")
	dups := 0
	for id, ids := range events {
		for _, e := range ids[1:] {
			require.Equal(t, ids[0], e, "a duplicate of %s carries the same event id", id)
			dups++
		}
	}
	require.Positive(t, dups, "the failing half was sent again")
}

// hookServer is a webhook receiver over TLS that passes each event it is
// posted to got and answers 200; with a hold, only once hold is closed
// (or the request ended).
type hookServer struct {
	*httptest.Server
	got chan llmq.ResultEvent
}

func newHookServer(t *testing.T, hold <-chan struct{}) *hookServer {
	t.Helper()
	h := &hookServer{got: make(chan llmq.ResultEvent, 64)}
	h.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var e llmq.ResultEvent
		if err := json.NewDecoder(r.Body).Decode(&e); err != nil {
			t.Errorf("event: %v", err)
		}
		h.got <- e
		if hold != nil {
			select {
			case <-hold:
			case <-r.Context().Done():
			}
		}
	}))
	t.Cleanup(h.Close)
	return h
}

// sender signs for the default tenant and trusts h's certificate (every
// httptest TLS server has the same one).
func (h *hookServer) sender(t *testing.T, timeout time.Duration) *webhook.Sender {
	t.Helper()
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("a secret of twenty-four b"))
	s, err := webhook.New(webhook.Config{Secrets: map[string][]string{llmq.DefaultTenant: {secret}}, AllowPrivate: true,
		Timeout: timeout, TLS: h.Client().Transport.(*http.Transport).TLSClientConfig})
	require.NoError(t, err)
	t.Cleanup(s.CloseIdleConnections)
	return s
}

func nextHook(t *testing.T, h *hookServer) llmq.ResultEvent {
	t.Helper()
	return next(t, h.got, "webhook post")
}

// TestNotifierWebhookEndpointsApart: a round posts to each webhook
// endpoint apart, so one that does not answer holds only its own events.
func TestNotifierWebhookEndpointsApart(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release)
	stuck, fine := newHookServer(t, hold), newHookServer(t, nil)
	b := setupNotifier(t)
	for i := range 3 {
		b.finish(t, fmt.Sprintf("stuck-%d", i), &llmq.Reply{Webhook: stuck.URL})
	}
	for i := range 3 {
		b.finish(t, fmt.Sprintf("fine-%d", i), &llmq.Reply{Webhook: fine.URL})
	}
	n := b.notifier(t, worker.NotifierConfig{Webhooks: stuck.sender(t, time.Minute)})
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.Round(b.ctx)
	}()
	require.Equal(t, "stuck-0", nextHook(t, stuck).JobID)
	for i := range 3 {
		require.Equal(t, fmt.Sprintf("fine-%d", i), nextHook(t, fine).JobID, "posted while the other endpoint holds its post")
	}
	release()
	<-done
	require.Equal(t, "stuck-1", nextHook(t, stuck).JobID)
	require.Equal(t, "stuck-2", nextHook(t, stuck).JobID)
	require.Empty(t, b.left(t), "all delivered")
}

// TestNotifierWebhookTimeoutSkipsTheRest: after a post that timed out the
// round does not post the endpoint's other events; they are retried after
// their backoff.
func TestNotifierWebhookTimeoutSkipsTheRest(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	stuck := newHookServer(t, hold)
	b := setupNotifier(t)
	for i := range 3 {
		b.finish(t, fmt.Sprintf("stuck-%d", i), &llmq.Reply{Webhook: stuck.URL})
	}
	n := b.notifier(t, worker.NotifierConfig{Webhooks: stuck.sender(t, 200*time.Millisecond)})
	n.Round(b.ctx)
	require.Len(t, stuck.got, 1, "one post, which timed out")
	left := b.left(t)
	require.Len(t, left, 3)
	for _, nt := range left {
		require.Equal(t, 1, nt.Attempts)
		if nt.JobID == "stuck-0" {
			require.Contains(t, nt.LastError, "Client.Timeout exceeded")
		} else {
			require.Contains(t, nt.LastError, "not sent, an earlier post to this webhook timed out")
		}
	}
}

// TestNotifierSlowRoundCallsAnother: while a round waits on a webhook,
// each interval calls another round, which delivers what fell due since.
func TestNotifierSlowRoundCallsAnother(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	stuck, fine := newHookServer(t, hold), newHookServer(t, nil)
	b := setupNotifier(t)
	b.clock.Advance(time.Hour) // every row written from now on is due
	b.finish(t, "stuck", &llmq.Reply{Webhook: stuck.URL})
	n := b.notifier(t, worker.NotifierConfig{Webhooks: stuck.sender(t, time.Minute), Rounds: 2})
	require.NoError(t, n.Start(b.ctx))
	t.Cleanup(func() { require.NoError(t, n.Stop(context.Background())) })
	t.Cleanup(sync.OnceFunc(func() { close(hold) })) // before the Stop, which waits for the held round
	require.Equal(t, "stuck", nextHook(t, stuck).JobID)

	b.finish(t, "fine", &llmq.Reply{Webhook: fine.URL})
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, b.clock.BlockUntilContext(ctx, 1), "the held round's ticker")
	b.clock.Advance(worker.NotifierIntervalDefault)
	require.Equal(t, "fine", nextHook(t, fine).JobID, "delivered while the first round is held")
}

// TestNotifierBrokerOutage: with the broker unreachable a delivery fails
// once its lease is spent (it does not hang, nor is it lost) and is retried
// after its backoff; once the broker is back the event arrives, once.
func TestNotifierBrokerOutage(t *testing.T) {
	t.Parallel()
	b := setupNotifier(t)
	u, err := url.Parse(rabbitmqtest.URL())
	require.NoError(t, err)
	proxy, err := chaos.New(u.Host)
	require.NoError(t, err)
	defer proxy.Close()
	u.Host = proxy.Addr()
	pub, err := rabbitmq.NewPublisher(rabbitmq.Config{URL: u.String(), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer pub.Close()
	b.pub = pub

	queue := rabbitmqtest.NewQueue(t)
	conn, err := amqp.Dial(rabbitmqtest.URL())
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclare(queue, false, false, false, false, nil)
	require.NoError(t, err)
	b.finish(t, "out", &llmq.Reply{To: queue})

	proxy.Cut()
	n := b.notifier(t, worker.NotifierConfig{Lease: time.Second, BackoffMin: 10 * time.Second})
	n.Round(b.ctx)
	got := b.only(t)
	require.Equal(t, 1, got.Attempts)
	require.NotEmpty(t, got.LastError, "the failed delivery is recorded, to be retried")
	_, ok, err := ch.Get(queue, true)
	require.NoError(t, err)
	require.False(t, ok, "nothing got through")

	proxy.Restore()
	b.clock.Advance(10 * time.Second)
	n.Round(b.ctx)
	require.Empty(t, b.left(t), "delivered once the broker is back")
	d, ok, err := ch.Get(queue, true)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, got.EventID, d.MessageId)
	_, ok, err = ch.Get(queue, true)
	require.NoError(t, err)
	require.False(t, ok, "once")
}

// TestNotifierWokenByWorker: a worker whose Routed is the notifier's Wake
// gets its jobs' result events out at once, though the notifier's
// interval never passes (its clock is fake and stands still after the
// first round, which found nothing).
func TestNotifierWokenByWorker(t *testing.T) {
	t.Parallel()
	const n = 5
	tb := setup(t, upstreamsim.Config{Seed: 4, Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: -1, TPM: -1}}})
	replier, ok := tb.pub.(transport.Replier)
	require.True(t, ok, "the RabbitMQ publisher replies")
	// An hour ahead, so the rows the worker writes are due on this clock.
	clock := clockwork.NewFakeClockAt(time.Now().Add(time.Hour))
	nt, err := worker.NewNotifier(worker.NotifierConfig{Outbox: tb.store.Notifications(), Replier: replier,
		Clock: clock, Log: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	require.NoError(t, nt.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, nt.Stop(context.Background())) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the first round ends waiting for the interval")

	w, err := worker.New(worker.Config{
		Subscriber: tb.subscriber(t, 64), Store: tb.store.Queue(), DeadLetters: tb.letters,
		Upstream: upstreamAt(tb.sim.URL, 10*time.Second), Strategy: shaping.StrategyRetry, Routed: nt.Wake,
		Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry(),
	})
	require.NoError(t, err)
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(ctx))
	})
	queue, ds := replyQueue(t)
	msgs := make([]transport.Message, n)
	for i := range n {
		msgs[i] = transport.Message{Value: jobJSON(fmt.Sprintf("woken-%d", i), "gpt-4o-mini", ""), ReplyTo: queue}
	}
	require.NoError(t, tb.pub.Publish(context.Background(), tb.queue, msgs...))
	seen := map[string]bool{}
	for len(seen) < n {
		var e llmq.ResultEvent
		require.NoError(t, json.Unmarshal(nextReply(t, ds).Body, &e))
		seen[e.JobID] = true
	}
}

// heldReplier holds its first Reply until hold is closed, as a broker
// slow to confirm would (held is closed once it is held).
type heldReplier struct {
	transport.Replier
	once       sync.Once
	held, hold chan struct{}
}

func (r *heldReplier) Reply(ctx context.Context, dest string, msgs ...transport.Message) error {
	first := false
	r.once.Do(func() { first = true })
	if first {
		close(r.held)
		<-r.hold
	}
	return r.Replier.Reply(ctx, dest, msgs...)
}

// TestNotifierRoundsOverlap: a claim that comes back full calls another
// round, which delivers what is due behind it while the first waits on
// its delivery: a slow confirm does not hold up every event.
func TestNotifierRoundsOverlap(t *testing.T) {
	t.Parallel()
	b := setupNotifier(t)
	b.clock.Advance(time.Hour) // every row written from now on is due
	queue, ds := replyQueue(t)
	reply := &llmq.Reply{To: queue}
	b.finish(t, "first", reply)
	b.finish(t, "second", reply)
	held := &heldReplier{Replier: b.pub, held: make(chan struct{}), hold: make(chan struct{})}
	b.pub = held
	n := b.notifier(t, worker.NotifierConfig{Batch: 1, Rounds: 2})
	require.NoError(t, n.Start(b.ctx))
	t.Cleanup(func() { require.NoError(t, n.Stop(context.Background())) })
	release := sync.OnceFunc(func() { close(held.hold) })
	t.Cleanup(release) // before the Stop, which waits for the held round
	select {
	case <-held.held:
	case <-time.After(30 * time.Second):
		t.Fatal("no round took the first event")
	}

	var e llmq.ResultEvent
	require.NoError(t, json.Unmarshal(nextReply(t, ds).Body, &e))
	require.Equal(t, "second", e.JobID, "delivered while the first round is held")
	release()
	require.NoError(t, json.Unmarshal(nextReply(t, ds).Body, &e))
	require.Equal(t, "first", e.JobID)
}
