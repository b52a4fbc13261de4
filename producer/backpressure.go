package producer

import (
	"context"
	"fmt"
	"math"
	"time"
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
)

// QueueState is one measurement of the queue.
type QueueState struct {
	// Depth is the jobs waiting or in flight: Lag, plus InFlight unless
	// the probe already counts it (Config.ProbeCountsInFlight).
	Depth int64
	// Lag is the probe's figure: Kafka consumer-group lag, RabbitMQ ready
	// messages.
	Lag int64
	// InFlight is the jobs running or retrying (from Postgres).
	InFlight int64
	// CompletionRatePerMin is the jobs finished per minute over the rate
	// window.
	CompletionRatePerMin float64
	// EstimatedDrain is Depth divided by the completion rate; 0 for an
	// empty queue. DrainKnown is false when the queue is not empty and no
	// job finished in the window (the wait cannot be estimated).
	EstimatedDrain time.Duration
	DrainKnown     bool
	// State follows the thresholds.
	State State
	// MeasuredAt is when the measurement was taken.
	MeasuredAt time.Time
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
	p.probeMu.Lock()
	defer p.probeMu.Unlock()
	p.mu.Lock()
	q, err, fresh = p.cached, p.cachedErr, p.cfg.DepthTTL > 0 && p.cfg.Clock.Now().Before(p.expires)
	p.mu.Unlock()
	if fresh {
		return q, err
	}
	q, err = p.measure(ctx)
	p.mu.Lock()
	p.cached, p.cachedErr, p.expires = q, err, p.cfg.Clock.Now().Add(p.cfg.DepthTTL)
	p.mu.Unlock()
	if err == nil {
		p.metrics.observeQueue(q)
	}
	return q, err
}

// invalidate drops the cached measurement (after a failed publish).
func (p *Producer) invalidate() {
	p.mu.Lock()
	p.expires = time.Time{}
	p.mu.Unlock()
}

func (p *Producer) measure(ctx context.Context) (QueueState, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ProbeTimeout)
	defer cancel()
	now := p.cfg.Clock.Now()
	q := QueueState{MeasuredAt: now}
	if p.cfg.DepthProbe != nil {
		lag, err := p.probe(ctx)
		if err != nil {
			return QueueState{}, fmt.Errorf("%w: depth probe: %w", ErrBrokerUnavailable, err)
		}
		q.Lag = lag
	}
	st, err := p.cfg.Store.QueueStats(ctx, now.Add(-p.cfg.RateWindow))
	if err != nil {
		return QueueState{}, fmt.Errorf("%w: measure queue: %w", ErrDatabaseUnavailable, err)
	}
	q.InFlight = st.InFlight
	q.CompletionRatePerMin = float64(st.Finished) / p.cfg.RateWindow.Minutes()
	q.Depth = q.Lag
	if !p.cfg.ProbeCountsInFlight {
		q.Depth += q.InFlight
	}
	q.EstimatedDrain, q.DrainKnown = q.waitFor(q.Depth)
	switch {
	case q.Depth >= p.cfg.HardDepth:
		q.State = StateRejecting
	case q.Depth >= p.cfg.SoftDepth:
		q.State = StateThrottled
	default:
		q.State = StateOK
	}
	return q, nil
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
