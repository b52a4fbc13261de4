package dlq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmq/llmq/internal/backoff"
)

// senderQueueSize bounds the notifications waiting for one sink. The rate
// limit keeps it short; when a sink is down for long and the limit is off,
// the overflow is counted as failed.
const senderQueueSize = 256

// Alerter groups dead-letter events into bursts and notifies a person
// through Alertmanager and/or a JSON webhook (see the package doc for the
// model). Notify is safe for concurrent use and never blocks; Start and Stop
// run the background goroutines: one that groups and one per sink.
type Alerter struct {
	cfg    AlertConfig
	events chan arrival
	sinks  []sink

	sent    *prometheus.CounterVec
	failed  *prometheus.CounterVec
	dropped prometheus.Counter

	mu       sync.Mutex
	started  bool
	stopping chan struct{} // closed by Stop: flush, drain and exit
	stopped  bool
	cancel   context.CancelCauseFunc
	done     chan struct{} // closed when every goroutine has exited
}

// arrival is an event (or a budget alert) stamped with the alerter clock
// when Notify (NotifyBudget) took it.
type arrival struct {
	ev     Event
	budget *BudgetAlert
	at     time.Time
}

// NewAlerter checks the config, registers the metrics and returns an
// alerter that buffers events until Start.
func NewAlerter(cfg AlertConfig) (*Alerter, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	a := &Alerter{
		cfg:    cfg,
		events: make(chan arrival, cfg.BufferSize),
		sinks:  newSinks(cfg),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmq_alerts_sent_total",
			Help: "Dead-letter notifications delivered, by sink and state (firing or resolved).",
		}, []string{"sink", "state"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmq_alerts_failed_total",
			Help: "Dead-letter notifications given up after every delivery attempt, by sink.",
		}, []string{"sink"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "llmq_alerts_dropped_total",
			Help: "Dead-letter events dropped because the alerter's buffer was full.",
		}),
		stopping: make(chan struct{}),
		done:     make(chan struct{}),
	}
	for _, s := range a.sinks {
		for _, st := range []alertState{stateFiring, stateResolved} {
			a.sent.WithLabelValues(s.name, string(st))
		}
		a.failed.WithLabelValues(s.name)
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{a.sent, a.failed, a.dropped} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("dlq: register alert metrics: %w", err)
			}
		}
	}
	return a, nil
}

// Notify hands a dead-letter event to the alerter. It never blocks: when the
// buffer is full the event is dropped and counted in
// llmq_alerts_dropped_total. Events given before Start wait in the buffer;
// events given after Stop are dropped once the buffer is full.
func (a *Alerter) Notify(ev Event) {
	select {
	case a.events <- arrival{ev: ev, at: a.cfg.Clock.Now()}:
	default:
		a.dropped.Inc()
	}
}

// Start runs the alerter in the background until Stop. Cancelling ctx stops
// it at once, without flushing. It fails with ErrAlreadyStarted when called
// twice.
func (a *Alerter) Start(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started {
		return ErrAlreadyStarted
	}
	a.started = true
	ctx, a.cancel = context.WithCancelCause(ctx)
	queues := make([]chan notification, len(a.sinks))
	var wg sync.WaitGroup
	for i, s := range a.sinks {
		queues[i] = make(chan notification, senderQueueSize)
		wg.Go(func() { a.deliverLoop(ctx, s, queues[i]) })
	}
	wg.Go(func() { a.groupLoop(ctx, queues) })
	go func() {
		wg.Wait()
		close(a.done)
	}()
	return nil
}

// Stop sends a firing notification for every burst with unreported events,
// waits for the sinks to deliver what they hold and stops the alerter. When
// ctx ends first, the remaining deliveries are abandoned (logged and counted
// as failed) and ctx's error is returned. Stop is safe to call more than
// once and on an alerter that was never started.
func (a *Alerter) Stop(ctx context.Context) error {
	a.mu.Lock()
	if !a.started || a.stopped {
		a.mu.Unlock()
		return nil
	}
	a.stopped = true
	close(a.stopping)
	a.mu.Unlock()
	select {
	case <-a.done:
		a.cancel(nil)
		return nil
	case <-ctx.Done():
		a.cancel(fmt.Errorf("dlq: alerter stop: %w", context.Cause(ctx)))
		<-a.done
		return fmt.Errorf("dlq: stop alerter: %w", ctx.Err())
	}
}

// groupLoop feeds events to the grouper and hands due notifications to the
// sinks' queues.
func (a *Alerter) groupLoop(ctx context.Context, queues []chan notification) {
	defer func() {
		for _, q := range queues {
			close(q)
		}
	}()
	g := newGrouper(a.cfg)
	var (
		timer   clockwork.Timer
		timerC  <-chan time.Time
		armedAt time.Time
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if next := g.next(); !next.Equal(armedAt) {
			if timer != nil {
				timer.Stop()
				timer, timerC = nil, nil
			}
			armedAt = next
			if !next.IsZero() {
				timer = a.cfg.Clock.NewTimer(next.Sub(a.cfg.Clock.Now()))
				timerC = timer.Chan()
			}
		}
		select {
		case arr := <-a.events:
			a.take(g, queues, arr)
		case <-timerC:
			timer, timerC, armedAt = nil, nil, time.Time{}
			// Events that arrived before the timer fired belong to this
			// round even if the loop has not read them yet.
			a.drain(g, queues)
			a.enqueue(queues, g.due(a.cfg.Clock.Now()))
		case <-a.stopping:
			a.drain(g, queues)
			a.enqueue(queues, g.flush(a.cfg.Clock.Now()))
			return
		case <-ctx.Done():
			return
		}
	}
}

// drain takes every arrival already in the buffer.
func (a *Alerter) drain(g *grouper, queues []chan notification) {
	for {
		select {
		case arr := <-a.events:
			a.take(g, queues, arr)
		default:
			return
		}
	}
}

// take adds a dead-letter event to its burst, or hands a budget alert to
// the sinks at once.
func (a *Alerter) take(g *grouper, queues []chan notification, arr arrival) {
	if arr.budget != nil {
		a.enqueue(queues, []notification{budgetNotification(arr.budget, arr.at)})
		return
	}
	g.add(arr.ev, arr.at)
}

// enqueue offers each notification to every sink without blocking.
func (a *Alerter) enqueue(queues []chan notification, ns []notification) {
	for _, n := range ns {
		for i, q := range queues {
			select {
			case q <- n:
			default:
				a.giveUp(a.sinks[i], n, 0, errors.New("dlq: sink queue full"))
			}
		}
	}
}

// deliverLoop delivers one sink's notifications in order until its queue is
// closed and empty, or ctx ends.
func (a *Alerter) deliverLoop(ctx context.Context, s sink, queue <-chan notification) {
	for n := range queue {
		if ctx.Err() != nil {
			a.giveUp(s, n, 0, context.Cause(ctx))
			continue
		}
		a.deliver(ctx, s, n)
	}
}

// deliver makes up to MaxAttempts attempts with exponential backoff.
func (a *Alerter) deliver(ctx context.Context, s sink, n notification) {
	body, err := s.render(n)
	if err != nil {
		a.giveUp(s, n, 0, fmt.Errorf("dlq: render %s notification: %w", s.name, err))
		return
	}
	policy := backoff.Policy{Base: a.cfg.RetryBackoff, Max: a.cfg.RetryMaxBackoff, MaxRetryAfter: a.cfg.RetryMaxBackoff}
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, a.cfg.SendTimeout)
		err := s.post(actx, a.cfg.HTTPClient, body)
		cancel()
		if err == nil {
			a.sent.WithLabelValues(s.name, string(n.State)).Inc()
			return
		}
		var derr *DeliveryError
		permanent := errors.As(err, &derr) && !derr.Retryable()
		if permanent || attempt >= a.cfg.MaxAttempts || ctx.Err() != nil {
			a.giveUp(s, n, attempt, err)
			return
		}
		var retryAfter time.Duration
		if derr != nil {
			retryAfter = derr.RetryAfter
		}
		wait := policy.Delay(attempt-1, retryAfter, nil)
		a.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "dlq: alert delivery failed, retrying",
			slog.String("sink", s.name), slog.Int("attempt", attempt), slog.Duration("wait", wait), slog.Any("error", err))
		t := a.cfg.Clock.NewTimer(wait)
		select {
		case <-t.Chan():
		case <-ctx.Done():
			t.Stop()
			a.giveUp(s, n, attempt, context.Cause(ctx))
			return
		}
	}
}

// giveUp logs and counts a notification that will not be delivered.
func (a *Alerter) giveUp(s sink, n notification, attempts int, err error) {
	a.failed.WithLabelValues(s.name).Inc()
	a.cfg.Logger.LogAttrs(context.Background(), slog.LevelError, "dlq: alert not delivered",
		slog.String("sink", s.name),
		slog.String("state", string(n.State)),
		slog.String("reason", string(n.Reason)),
		slog.String("tenant", n.Tenant),
		slog.Int("count", n.Count),
		slog.Int("attempts", attempts),
		slog.Any("error", err))
}
