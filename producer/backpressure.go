package producer

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/llmq/llmq/store"
)

// State is the queue's backpressure state.
type State string

const (
	// StateOK: the depth is below SoftDepth.
	StateOK State = "ok"
	// StateThrottled: the depth reached SoftDepth; jobs are accepted and
	// producers are asked to slow down.
	StateThrottled State = "throttled"
	// StateRejecting: the depth reached HardDepth; jobs are refused.
	StateRejecting State = "rejecting"
	// StateNoConsumer: jobs wait and no worker has consumed any for
	// NoConsumerAfter (no live lease, no scheduler at work): they are
	// accepted and will wait until a worker runs; no drain time is
	// estimated.
	StateNoConsumer State = "no_consumer"
)

// QueueState is one measurement of the queue.
type QueueState struct {
	// Depth is the jobs waiting or in flight: the larger of Lag and Queued,
	// plus InFlight. Not their sum: a job the producer (or the API)
	// records is queued in Postgres before its message is published, and
	// counts in Lag too until a worker ingests the duplicate. So the depth
	// is exact for the producer's jobs, and short by at most the workers'
	// ingest window for jobs published to the broker directly.
	Depth int64
	// Lag is the probe's figure: Kafka consumer-group lag, RabbitMQ ready
	// messages (messages no worker has ingested).
	Lag int64
	// Queued is the jobs queued in Postgres (ingested or recorded by the
	// producer, not yet claimed), counted up to Config.HardDepth: Depth and
	// EstimatedDrain are then floors, and the state is StateRejecting
	// either way.
	Queued int64
	// InFlight is the jobs running or retrying (from Postgres).
	InFlight int64
	// CompletionRatePerMin is the jobs all workers finished per minute over
	// the rate window (from Postgres).
	CompletionRatePerMin float64
	// EstimatedDrain is Depth divided by the completion rate, or before
	// any job finished in the window by Config.QuotaRatePerMin; 0 for an
	// empty queue. DrainKnown is false when the queue is not empty and
	// neither rate is known, or no worker consumes (StateNoConsumer).
	EstimatedDrain time.Duration
	DrainKnown     bool
	// State follows the thresholds.
	State State
	// MeasuredAt is when the measurement was taken.
	MeasuredAt time.Time
	// Tenant is one tenant's part of the queue: set by PublishBatch (the
	// tenant of the batch's first job) and QueueOf; nil for the whole
	// queue.
	Tenant *TenantQueue
}

// Own is the figures q reports to one tenant: its part's depth, drain
// estimate and state when q has one, else the queue's.
func (q QueueState) Own() (depth int64, drain time.Duration, drainKnown bool, state State) {
	if t := q.Tenant; t != nil {
		return t.Depth, t.EstimatedDrain, t.DrainKnown, t.State
	}
	return q.Depth, q.EstimatedDrain, q.DrainKnown, q.State
}

// waitFor returns how long the queue needs, at the measured rate, to shrink
// by n jobs, and whether the rate is known.
func (q QueueState) waitFor(n int64) (time.Duration, bool) {
	if n <= 0 {
		return 0, true
	}
	if q.CompletionRatePerMin <= 0 {
		return 0, false
	}
	secs := float64(n) / (q.CompletionRatePerMin / 60)
	if secs > float64(math.MaxInt64/int64(time.Second)) {
		return time.Duration(math.MaxInt64), true
	}
	return time.Duration(secs * float64(time.Second)), true
}

// retryHint clamps a wait into [1s, RetryAfterMax], whole seconds up.
func retryHint(d time.Duration, known bool) time.Duration {
	if !known {
		return RetryAfterDefault
	}
	d = min(max(d, time.Second), RetryAfterMax)
	return (d + time.Second - 1).Truncate(time.Second)
}

// Queue returns the queue's state, measured at most DepthTTL ago. A broker
// that cannot be measured returns ErrBrokerUnavailable.
func (p *Producer) Queue(ctx context.Context) (QueueState, error) {
	now := p.cfg.Clock.Now()
	p.mu.Lock()
	q, err, fresh := p.cached, p.cachedErr, p.cfg.DepthTTL > 0 && now.Before(p.expires)
	p.mu.Unlock()
	if fresh {
		return q, err
	}
	return p.remeasure(ctx)
}

// remeasure measures the queue unless a measurement that ended while it
// waited for its turn is fresh.
func (p *Producer) remeasure(ctx context.Context) (QueueState, error) {
	p.probeMu.Lock()
	defer p.probeMu.Unlock()
	p.mu.Lock()
	q, err, fresh := p.cached, p.cachedErr, p.cfg.DepthTTL > 0 && p.cfg.Clock.Now().Before(p.expires)
	p.mu.Unlock()
	if fresh {
		return q, err
	}
	q, t, err := p.measure(ctx)
	p.mu.Lock()
	p.cached, p.cachedErr, p.expires = q, err, p.cfg.Clock.Now().Add(p.cfg.DepthTTL)
	if err == nil {
		p.table, p.recorded = t, make(map[string]int64, len(p.recorded))
		p.recordedProjects = make(map[store.ScopeRef]int64, len(p.recordedProjects))
	}
	p.mu.Unlock()
	if err == nil {
		p.metrics.observeQueue(q)
	}
	return q, err
}

// admission is the state PublishBatch admits jobs by: Queue's, except when
// the last measurement succeeded and expired less than ProbeTimeout ago.
// Then the callers go on with it while one goroutine takes the next
// measurement, instead of every caller of the moment waiting for the
// probe's round trips (a latency spike each DepthTTL under load). After a
// failed measurement or publish, callers wait for a new one.
func (p *Producer) admission(ctx context.Context) (QueueState, error) {
	now := p.cfg.Clock.Now()
	p.mu.Lock()
	q, err := p.cached, p.cachedErr
	fresh := p.cfg.DepthTTL > 0 && now.Before(p.expires)
	usable := !fresh && err == nil && p.cfg.DepthTTL > 0 && !p.expires.IsZero() &&
		now.Before(p.expires.Add(p.cfg.ProbeTimeout))
	var refreshed chan struct{}
	if usable && p.refreshed == nil {
		refreshed = make(chan struct{})
		p.refreshed = refreshed
	}
	p.mu.Unlock()
	switch {
	case fresh:
		return q, err
	case !usable:
		return p.remeasure(ctx)
	case refreshed != nil:
		go func() {
			_, _ = p.remeasure(context.Background())
			p.mu.Lock()
			p.refreshed = nil
			p.mu.Unlock()
			close(refreshed)
		}()
	}
	return q, nil
}

// invalidate drops the cached measurement (after a failed publish).
func (p *Producer) invalidate() {
	p.mu.Lock()
	p.expires = time.Time{}
	p.mu.Unlock()
}

// measure measures the queue and the tenants holding jobs.
func (p *Producer) measure(ctx context.Context) (QueueState, *tenantTable, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ProbeTimeout)
	defer cancel()
	now := p.cfg.Clock.Now()
	q := QueueState{MeasuredAt: now}
	if p.cfg.DepthProbe != nil {
		lag, err := p.probe(ctx)
		if err != nil {
			return QueueState{}, nil, fmt.Errorf("%w: depth probe: %w", ErrBrokerUnavailable, err)
		}
		q.Lag = lag
	}
	// Counted up to the hard depth: past it the state is the same, and a
	// backlog of 1,000,000 jobs counted in full costs Postgres 55 ms to
	// 0.5 s per probe (8 ms up to the default hard depth).
	st, err := p.cfg.Store.QueueStats(ctx, now.Add(-p.cfg.RateWindow), p.cfg.HardDepth)
	if err != nil {
		return QueueState{}, nil, fmt.Errorf("%w: measure queue: %w", ErrDatabaseUnavailable, err)
	}
	t, err := p.measureTenants(ctx, now.Add(-p.cfg.RateWindow))
	if err != nil {
		return QueueState{}, nil, fmt.Errorf("%w: measure tenants: %w", ErrDatabaseUnavailable, err)
	}
	q.Queued, q.InFlight = st.Queued, st.InFlight
	q.CompletionRatePerMin = float64(st.Finished) / p.cfg.RateWindow.Minutes()
	q.Depth = max(q.Lag, q.Queued) + q.InFlight
	drain := q
	if st.Finished == 0 || now.Sub(st.FirstFinished) < p.cfg.RateWindow*9/10 {
		// Cold start: until completions span the window, the rate over the
		// whole window understates the workers (one job finished a second
		// ago reads as one job in five minutes, and would refuse every
		// deadline): the estimate is then never below the rate the quotas
		// allow.
		drain.CompletionRatePerMin = max(drain.CompletionRatePerMin, p.cfg.QuotaRatePerMin)
	}
	q.EstimatedDrain, q.DrainKnown = drain.waitFor(q.Depth)
	t.drainRate = drain.CompletionRatePerMin
	stranded := p.stranded(now, q.Lag+q.Queued > 0 && !st.Consuming)
	switch {
	case q.Depth >= p.cfg.HardDepth:
		q.State = StateRejecting
	case stranded:
		q.State = StateNoConsumer
	case q.Depth >= p.cfg.SoftDepth:
		q.State = StateThrottled
	default:
		q.State = StateOK
	}
	if stranded {
		q.EstimatedDrain, q.DrainKnown = 0, false
	}
	return q, t, nil
}

// stranded reports whether jobs have waited with no worker consuming for
// NoConsumerAfter, given whether they do at now: a worker that has not
// ingested or claimed the first jobs yet is not taken for none.
func (p *Producer) stranded(now time.Time, waiting bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case !waiting:
		p.unconsumedSince = time.Time{}
		return false
	case p.unconsumedSince.IsZero():
		p.unconsumedSince = now
	}
	return p.cfg.NoConsumerAfter >= 0 && now.Sub(p.unconsumedSince) >= p.cfg.NoConsumerAfter
}

// probe runs the depth probe bounded by ctx even when the probe itself does
// not watch ctx (a RabbitMQ dial): a late answer is dropped.
func (p *Producer) probe(ctx context.Context) (int64, error) {
	type result struct {
		n   int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := p.cfg.DepthProbe.Depth(ctx)
		done <- result{n, err}
	}()
	select {
	case r := <-done:
		return r.n, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}
