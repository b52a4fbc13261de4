package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/background"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
)

// Notifier defaults (NotifierConfig).
const (
	NotifierIntervalDefault   = 250 * time.Millisecond
	NotifierLeaseDefault      = 30 * time.Second
	NotifierBatchDefault      = 256
	NotifierRoundsDefault     = 2
	NotifierRetryForDefault   = 24 * time.Hour
	NotifierBackoffMinDefault = time.Second
	NotifierBackoffMaxDefault = 5 * time.Minute
)

// NotificationOutbox is what a Notifier needs of the store: its
// notifications outbox (*store.Notifications).
type NotificationOutbox interface {
	Claim(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]*store.Notification, error)
	Settle(ctx context.Context, claimed []*store.Notification, failed map[string]store.Failure) error
	Backlog(ctx context.Context) (store.NotificationBacklog, error)
}

// WebhookSender posts a result event to a webhook (internal/webhook's
// Sender).
type WebhookSender interface {
	Send(ctx context.Context, tenant, url, eventID string, at time.Time, payload []byte) error
}

// NotifierConfig configures a Notifier.
type NotifierConfig struct {
	// Outbox is the notifications outbox. Required.
	Outbox NotificationOutbox
	// Replier publishes to reply queues and results topics; nil fails
	// every notification that names one (it is retried, then dead).
	Replier transport.Replier
	// Webhooks posts to webhooks; nil fails every notification that names
	// one.
	Webhooks WebhookSender
	// Interval is the longest wait after a round that was not full: a
	// Wake ends it sooner (default NotifierIntervalDefault).
	Interval time.Duration
	// Lease is how long a claimed notification stays hidden from other
	// notifiers; one whose notifier died is delivered by another after it
	// (default NotifierLeaseDefault).
	Lease time.Duration
	// Batch is the events one claim takes (default NotifierBatchDefault):
	// at most, but for the last batch of an ending statement's events,
	// which it takes whole.
	Batch int
	// Rounds is the most rounds that run at once (default
	// NotifierRoundsDefault): after a claim that came back full, and
	// each Interval while a round's deliveries last, another round claims
	// what is due while the first waits for its broker's confirms or its
	// webhooks.
	Rounds int
	// RetryFor is how long a notification is retried before it ends dead
	// with notification_undeliverable (default NotifierRetryForDefault,
	// 24 h).
	RetryFor time.Duration
	// BackoffMin and BackoffMax bound the wait after a failed delivery,
	// doubling from BackoffMin (defaults NotifierBackoffMinDefault and
	// NotifierBackoffMaxDefault).
	BackoffMin, BackoffMax time.Duration
	// Clock, Log and Registerer: the real clock, slog.Default() and no
	// metrics when nil.
	Clock      clockwork.Clock
	Log        *slog.Logger
	Registerer prometheus.Registerer
}

// WithDefaults fills the zero fields with their defaults.
func (c NotifierConfig) WithDefaults() NotifierConfig {
	c.Interval = cmp.Or(c.Interval, NotifierIntervalDefault)
	c.Lease = cmp.Or(c.Lease, NotifierLeaseDefault)
	c.Batch = cmp.Or(c.Batch, NotifierBatchDefault)
	c.Rounds = cmp.Or(c.Rounds, NotifierRoundsDefault)
	c.RetryFor = cmp.Or(c.RetryFor, NotifierRetryForDefault)
	c.BackoffMin = cmp.Or(c.BackoffMin, NotifierBackoffMinDefault)
	c.BackoffMax = cmp.Or(c.BackoffMax, NotifierBackoffMaxDefault)
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return c
}

func (c NotifierConfig) validate() error {
	var errs []error
	if c.Outbox == nil {
		errs = append(errs, errors.New("worker: notifier: Outbox is required"))
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"Interval", c.Interval}, {"Lease", c.Lease}, {"RetryFor", c.RetryFor}, {"BackoffMin", c.BackoffMin}, {"BackoffMax", c.BackoffMax}} {
		if f.d < 0 {
			errs = append(errs, fmt.Errorf("worker: notifier: %s must not be negative, got %s", f.name, f.d))
		}
	}
	if c.Batch < 0 {
		errs = append(errs, fmt.Errorf("worker: notifier: Batch must not be negative, got %d", c.Batch))
	}
	if c.Rounds < 0 {
		errs = append(errs, fmt.Errorf("worker: notifier: Rounds must not be negative, got %d", c.Rounds))
	}
	if c.BackoffMax < c.BackoffMin {
		errs = append(errs, fmt.Errorf("worker: notifier: BackoffMax %s is below BackoffMin %s", c.BackoffMax, c.BackoffMin))
	}
	return errors.Join(errs...)
}

// Notifier publishes the result events of the notifications outbox: it
// claims due events (a committed claim under a lease), publishes each
// after the commit to its reply queue or results topic and its webhook,
// then settles the round (delivered events leave the outbox); a failure
// is retried with backoff for RetryFor, then the event ends dead
// (store.NotificationUndeliverable) and its job keeps its status.
// Delivery is at least once: a notifier that dies between the publication
// and the settlement publishes again, with the same event id
// (docs/design/notifications.md). Several notifiers may share one outbox.
type Notifier struct {
	cfg     NotifierConfig
	run     background.Runner
	metrics notifierMetrics
	// wake holds one pending Wake: wakes during a round make one more.
	wake chan struct{}
	// another holds one pending call for another round: a claim came
	// back full, or a round's deliveries outlast the interval (loop).
	another chan struct{}
	// crashAfterClaim, set by tests, makes a round stop after its claim
	// committed, as a process killed there would.
	crashAfterClaim func() bool
}

type notifierMetrics struct {
	delivered, retries, dead *prometheus.CounterVec
	pending, oldest          prometheus.Gauge
}

// NewNotifier returns a notifier; Start runs it.
func NewNotifier(cfg NotifierConfig) (*Notifier, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := &Notifier{cfg: cfg, wake: make(chan struct{}, 1), another: make(chan struct{}, 1), metrics: notifierMetrics{
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llmq_notifications_delivered_total",
			Help: "Result events delivered, by route (reply, webhook)."}, []string{"route"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llmq_notifications_retries_total",
			Help: "Failed deliveries of result events that will be tried again, by route."}, []string{"route"}),
		dead: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llmq_notifications_dead_total",
			Help: "Result events given up after the retry period (notification_undeliverable)."}, []string{"route"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "llmq_notifications_pending",
			Help: "Result events in the outbox neither delivered nor dead."}),
		oldest: prometheus.NewGauge(prometheus.GaugeOpts{Name: "llmq_notifications_oldest_pending_age_seconds",
			Help: "Age of the oldest result event not yet delivered (0: none)."}),
	}}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{n.metrics.delivered, n.metrics.retries, n.metrics.dead,
			n.metrics.pending, n.metrics.oldest} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("worker: notifier: register metrics: %w", err)
			}
		}
	}
	return n, nil
}

// Start runs the notifier in the background until Stop or ctx ends.
func (n *Notifier) Start(ctx context.Context) error { return n.run.Start(ctx, n.loop) }

// Stop ends the notifier and waits for the rounds under way; a
// notification it claimed and did not mark is delivered after its lease.
// Stop may be called more than once.
func (n *Notifier) Stop(ctx context.Context) error { return n.run.Stop(ctx) }

// Wake makes the notifier claim now rather than after its Interval: this
// process stored the end of a job with a route (worker.Config.Routed).
// It never blocks; the wakes that come during a round make one more
// round, which takes what they announced together.
func (n *Notifier) Wake() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// loop runs the rounds: the first claims after each wake or interval
// (and reads the backlog for the gauges); up to cfg.Rounds-1 more join
// when a claim comes back full or a round's deliveries outlast the
// interval, each claiming its own rows (the lease keeps them apart), so
// that what is due behind a round waiting on its deliveries goes out
// meanwhile.
func (n *Notifier) loop(ctx context.Context) {
	var wg sync.WaitGroup
	for range n.cfg.Rounds - 1 {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-n.another:
				}
				for n.Round(ctx) {
				}
			}
		})
	}
	n.first(ctx)
	wg.Wait()
}

func (n *Notifier) first(ctx context.Context) {
	for rounds := 0; ; rounds++ {
		if rounds%20 == 0 {
			n.gauge(ctx)
		}
		busy := n.Round(ctx)
		if busy {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-n.wake:
		case <-n.cfg.Clock.After(n.cfg.Interval):
		}
	}
}

func (n *Notifier) gauge(ctx context.Context) {
	b, err := n.cfg.Outbox.Backlog(ctx)
	if err != nil {
		return
	}
	n.metrics.pending.Set(float64(b.Pending))
	age := 0.0
	if !b.Oldest.IsZero() {
		age = n.cfg.Clock.Since(b.Oldest).Seconds()
	}
	n.metrics.oldest.Set(age)
}

// Round claims one batch of due notifications and delivers it; it reports
// whether the batch was full (more may be due).
func (n *Notifier) Round(ctx context.Context) bool {
	now := n.cfg.Clock.Now()
	claimed, err := n.cfg.Outbox.Claim(ctx, now, n.cfg.Lease, n.cfg.Batch)
	if err != nil && ctx.Err() == nil {
		n.cfg.Log.Warn("notifier: claim", slog.Any("error", err), slog.Int("claimed", len(claimed)))
	}
	if n.crashAfterClaim != nil && n.crashAfterClaim() || len(claimed) == 0 {
		return false
	}
	full := err == nil && len(claimed) >= n.cfg.Batch
	if full {
		n.more() // more may be due: a round that waits claims them
	}
	mark := context.WithoutCancel(ctx)
	// A delivery that outlasts the lease (a broker down: the publisher
	// redials until its context ends) fails, and is retried after its
	// backoff, rather than be claimed and sent by another notifier too.
	dctx, cancel := context.WithTimeout(ctx, n.cfg.Lease)
	slow := n.whileSlow()
	failed := n.deliverAll(dctx, claimed)
	slow()
	cancel()
	at := n.cfg.Clock.Now()
	settled := make(map[string]store.Failure, len(failed))
	for _, nt := range claimed {
		f, ok := failed[nt.EventID]
		if !ok {
			continue
		}
		next := at.Add(NotifierBackoff(nt.Attempts, n.cfg.BackoffMin, n.cfg.BackoffMax))
		dead := next.After(nt.RetrySince.Add(n.cfg.RetryFor))
		if dead {
			n.metrics.dead.WithLabelValues(f.route).Inc()
			n.cfg.Log.Warn("notifier: undeliverable", slog.String("event_id", nt.EventID), slog.String("tenant", nt.Tenant),
				slog.String("job_id", nt.JobID), slog.Any("error", f.err))
		} else {
			n.metrics.retries.WithLabelValues(f.route).Inc()
		}
		settled[nt.EventID] = store.Failure{At: at, Error: f.err.Error(), Next: next, Dead: dead}
	}
	if err := n.cfg.Outbox.Settle(mark, claimed, settled); err != nil {
		n.cfg.Log.Warn("notifier: settle", slog.Int("notifications", len(claimed)), slog.Any("error", err))
	}
	return full
}

// more calls another round (loop), unless one is called already.
func (n *Notifier) more() {
	select {
	case n.another <- struct{}{}:
	default:
	}
}

// whileSlow calls another round each Interval until the returned func is
// called: what falls due while a round waits on an endpoint slow to
// answer goes out meanwhile, in a round of its own.
func (n *Notifier) whileSlow() (stop func()) {
	if n.cfg.Rounds < 2 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := n.cfg.Clock.NewTicker(n.cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.Chan():
				n.more()
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// TenantReplier answers a tenant's route for its jobs that name none
// (Config.TenantReplies).
type TenantReplier interface {
	TenantReply(tenant string) (llmq.Reply, bool)
}

// StaticTenantReplies is a TenantReplier that never changes.
type StaticTenantReplies map[string]llmq.Reply

// TenantReply is m's route of tenant.
func (m StaticTenantReplies) TenantReply(tenant string) (llmq.Reply, bool) {
	r, ok := m[tenant]
	return r, ok
}

// tenantReply is src's route of tenant; none when src is nil.
func tenantReply(src TenantReplier, tenant string) (llmq.Reply, bool) {
	if src == nil {
		return llmq.Reply{}, false
	}
	return src.TenantReply(tenant)
}

// Result-event headers on the bus: the event id and correlation id, after
// the echoed headers of the job's message.
const (
	HeaderEventID       = "llmq-event-id"
	HeaderCorrelationID = "llmq-correlation-id"
)

// failure is why a notification was not delivered, and on which route.
type failure struct {
	route string
	err   error
}

// deliverAll publishes claimed to their destinations: the replies of one
// destination in one Reply (so a broker confirms them together), then
// the webhooks, each endpoint's in turn and the endpoints at once. It
// returns the failures by event id; a notification with a reply and a
// webhook counts as delivered only when both took it (the one that did
// gets it again, with the same event id).
func (n *Notifier) deliverAll(ctx context.Context, claimed []*store.Notification) map[string]failure {
	failed := map[string]failure{}
	payloads := make(map[string][]byte, len(claimed))
	type group struct {
		ids  []string
		msgs []transport.Message
	}
	byDest := map[string]*group{}
	var dests []string
	var buf []byte // the round's payloads, one after the other
	for _, nt := range claimed {
		e := nt.Event()
		start := len(buf)
		buf = appendEvent(buf, &e)
		payload := buf[start:len(buf):len(buf)]
		payloads[nt.EventID] = payload
		if nt.Reply.To == "" {
			continue
		}
		if n.cfg.Replier == nil {
			failed[nt.EventID] = failure{"reply", errors.New("no broker to reply on")}
			continue
		}
		g := byDest[nt.Reply.To]
		if g == nil {
			g = &group{}
			byDest[nt.Reply.To] = g
			dests = append(dests, nt.Reply.To)
		}
		g.ids = append(g.ids, nt.EventID)
		g.msgs = append(g.msgs, replyMessage(nt, payload))
	}
	for _, d := range dests {
		g := byDest[d]
		if err := n.cfg.Replier.Reply(ctx, d, g.msgs...); err != nil {
			for _, id := range g.ids {
				failed[id] = failure{"reply", err}
			}
			continue
		}
		n.metrics.delivered.WithLabelValues("reply").Add(float64(len(g.ids)))
	}
	hooks := map[string][]*store.Notification{}
	var urls []string
	for _, nt := range claimed {
		if _, bad := failed[nt.EventID]; bad || nt.Reply.Webhook == "" {
			continue
		}
		if n.cfg.Webhooks == nil {
			failed[nt.EventID] = failure{"webhook", errors.New("no webhook sender configured")}
			continue
		}
		if hooks[nt.Reply.Webhook] == nil {
			urls = append(urls, nt.Reply.Webhook)
		}
		hooks[nt.Reply.Webhook] = append(hooks[nt.Reply.Webhook], nt)
	}
	// Each endpoint's events go one after another, the endpoints at once:
	// an endpoint slow to answer holds its own events, not the others'.
	var g errgroup.Group
	g.SetLimit(webhookParallel)
	hookFailed := make([]map[string]failure, len(urls))
	for i, u := range urls {
		g.Go(func() error {
			hookFailed[i] = n.sendHooks(ctx, u, hooks[u], payloads)
			return nil
		})
	}
	_ = g.Wait() // the sends report their failures in hookFailed
	for _, f := range hookFailed {
		maps.Copy(failed, f)
	}
	return failed
}

// webhookParallel is the most webhook endpoints a round posts to at once.
const webhookParallel = 16

// sendHooks posts the events nts to the webhook u, in order, and returns
// the failures by event id. After a post that timed out the rest are not
// sent (they fail, and are retried after their backoff): an endpoint that
// does not answer costs the round one timeout, not one per event.
func (n *Notifier) sendHooks(ctx context.Context, u string, nts []*store.Notification, payloads map[string][]byte) map[string]failure {
	failed := map[string]failure{}
	var timedOut error
	for _, nt := range nts {
		if timedOut != nil {
			failed[nt.EventID] = failure{"webhook", fmt.Errorf("not sent, an earlier post to this webhook timed out: %w", timedOut)}
			continue
		}
		if err := n.cfg.Webhooks.Send(ctx, nt.Tenant, u, nt.EventID, n.cfg.Clock.Now(), payloads[nt.EventID]); err != nil {
			failed[nt.EventID] = failure{"webhook", err}
			if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
				timedOut = err
			}
			continue
		}
		n.metrics.delivered.WithLabelValues("webhook").Inc()
	}
	return failed
}

// replyMessage is nt's result event as a broker message: keyed by the job
// id, the job message's headers echoed with the event and correlation
// ids added.
func replyMessage(nt *store.Notification, payload []byte) transport.Message {
	h := maps.Clone(nt.Reply.Headers)
	if h == nil {
		h = map[string]string{}
	}
	h[HeaderEventID] = nt.EventID
	if nt.Reply.CorrelationID != "" {
		h[HeaderCorrelationID] = nt.Reply.CorrelationID
	}
	return transport.Message{Key: []byte(nt.JobID), Value: payload, Headers: h, CorrelationID: nt.Reply.CorrelationID, ID: nt.EventID}
}

// NotifierBackoff is the wait after the attempts-th failed delivery:
// lo doubled per attempt after the first, at most hi.
func NotifierBackoff(attempts int, lo, hi time.Duration) time.Duration {
	d := lo
	for i := 1; i < attempts && d < hi; i++ {
		d *= 2
	}
	return min(d, hi)
}
