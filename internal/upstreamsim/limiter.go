package upstreamsim

import (
	"math"
	"sync"
	"time"
)

// Reason says why the Limiter rejected a request.
type Reason string

// Rejection reasons.
const (
	// ReasonNone: the request was admitted.
	ReasonNone Reason = ""
	// ReasonRequests: the RPM bucket is empty.
	ReasonRequests Reason = "requests"
	// ReasonTokens: the TPM bucket holds less than the request's charge.
	ReasonTokens Reason = "tokens"
	// ReasonTooLarge: the charge exceeds the whole TPM limit; never succeeds.
	ReasonTooLarge Reason = "too_large"
	// ReasonConcurrency: MaxConcurrency requests are already in flight.
	ReasonConcurrency Reason = "concurrency"
	// ReasonBurst: the admitted rate would grow faster than BurstGrowth.
	ReasonBurst Reason = "burst"
)

// Admission is one request presented to the Limiter.
type Admission struct {
	// Key is the API key, Model the model name.
	Key, Model string
	// Tokens is the TPM charge (prompt + max output, or their max).
	Tokens int64
	// HoldOnBurst makes a burst rejection free: the request will be queued
	// and presented again (X-DashScope-Wait-Timeout), so it must not
	// consume an RPM unit on every poll.
	HoldOnBurst bool
}

// Decision is the Limiter's answer, with the values for the x-ratelimit-*
// headers and the 429 message.
type Decision struct {
	// Allowed reports whether the request was admitted; the caller must
	// then call Release once it is done.
	Allowed bool
	// Reason is the rejection reason (ReasonNone when allowed).
	Reason Reason
	// RetryAfter is the exact wait until the rejected request would fit
	// (bucket refill, or the next second for burst, 1s for concurrency).
	RetryAfter time.Duration
	// Limits are the limits in force.
	Limits Limits
	// RemainingRequests and RemainingTokens are the bucket levels after
	// the decision, rounded down.
	RemainingRequests, RemainingTokens int64
	// ResetRequests and ResetTokens are the times until each bucket is
	// full again.
	ResetRequests, ResetTokens time.Duration
	// UsedRequests and UsedTokens are capacity minus level before the
	// charge, rounded up (the "Used" of a 429 message).
	UsedRequests, UsedTokens int64
	// InFlight is the number of in-flight requests of the (key, model)
	// after the decision.
	InFlight int
}

// Limiter enforces Limits per (API key, model): continuously refilling RPM
// and TPM buckets (capacity = the per-minute limit, refill = limit/60 per
// second, starting full), a concurrency cap and a burst (growth-rate) limit.
// With ShortBuckets it also enforces each limit over a few seconds (see
// EnforcementShort). Every method takes the time explicitly, so it is
// tested as tables over fixed instants. The zero value is not usable; call
// NewLimiter. It is safe for concurrent use.
type Limiter struct {
	mu     sync.Mutex
	states map[limitKey]*limitState
	// short is the refill a short bucket holds; 0 = per-minute buckets only.
	short time.Duration
}

// LimiterOption configures a Limiter.
type LimiterOption func(*Limiter)

// ShortBuckets enforces every limit with a bucket holding only d of refill
// besides the per-minute one (EnforcementShort); the decisions' remaining,
// reset and used values stay the per-minute ones.
func ShortBuckets(d time.Duration) LimiterOption { return func(l *Limiter) { l.short = d } }

type limitKey struct{ key, model string }

type bucket struct {
	capacity float64
	rate     float64
	level    float64
	last     time.Time
}

// refill brings the bucket to time now for limit c per minute, holding
// window of refill (at least one unit).
func (b *bucket) refill(now time.Time, c int64, window time.Duration) {
	rate := float64(c) / 60
	capacity := max(1, rate*window.Seconds())
	if b.last.IsZero() {
		b.capacity, b.rate, b.level, b.last = capacity, rate, capacity, now
		return
	}
	if capacity != b.capacity {
		b.capacity, b.rate = capacity, rate
		b.level = min(b.level, capacity)
	}
	if now.After(b.last) {
		b.level = min(b.capacity, b.level+b.rate*now.Sub(b.last).Seconds())
		b.last = now
	}
}

// wait is the time until the bucket holds n.
func (b *bucket) wait(n float64) time.Duration {
	if b.level >= n-eps {
		return 0
	}
	return secondsToDuration((n - b.level) / b.rate)
}

// need is what a charge of n waits for: n, or a full bucket when n is
// larger (a request larger than a short bucket goes into debt).
func (b *bucket) need(n float64) float64 { return min(n, b.capacity) }

// reset is the time until the bucket is full again.
func (b *bucket) reset() time.Duration { return b.wait(b.capacity) }

func (b *bucket) remaining() int64 { return int64(math.Floor(max(b.level, 0) + eps)) }
func (b *bucket) used() int64      { return int64(math.Ceil(b.capacity - b.level - eps)) }

// eps absorbs floating-point error in bucket levels: a client that waits
// exactly the advertised time must fit.
const eps = 1e-6

// secondsToDuration converts to a duration rounded up to the microsecond,
// ignoring floating-point noise below it.
func secondsToDuration(s float64) time.Duration {
	return time.Duration(math.Ceil(s*1e6-eps)) * time.Microsecond
}

type limitState struct {
	requests, tokens bucket
	// shortReq and shortTok are the short buckets (Limiter.short > 0).
	shortReq, shortTok bucket
	inFlight           int
	burstSecond        int64
	burstCount         float64
	burstPrev          float64
}

// NewLimiter returns an empty Limiter.
func NewLimiter(opts ...LimiterOption) *Limiter {
	l := &Limiter{states: make(map[limitKey]*limitState)}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Reset forgets every bucket (all start full again) and in-flight count.
func (l *Limiter) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.states)
}

// Admit decides on a request at time now under limits lim (with defaults
// applied: -1 means unlimited). On success the caller holds a concurrency
// slot until Release.
func (l *Limiter) Admit(now time.Time, lim Limits, a Admission) Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := limitKey{a.Key, a.Model}
	st := l.states[k]
	if st == nil {
		st = &limitState{}
		l.states[k] = st
	}
	hasRPM, hasTPM := lim.RPM > 0, lim.TPM > 0
	st.refill(now, lim, l.short)
	st.rollBurst(now)
	d := Decision{Limits: lim}
	if hasRPM {
		d.UsedRequests = st.requests.used()
	}
	if hasTPM {
		d.UsedTokens = st.tokens.used()
	}
	st.decide(now, lim, a, l.short > 0, &d)
	if hasRPM {
		d.RemainingRequests = st.requests.remaining()
		d.ResetRequests = st.requests.reset()
	}
	if hasTPM {
		d.RemainingTokens = st.tokens.remaining()
		d.ResetTokens = st.tokens.reset()
	}
	d.InFlight = st.inFlight
	return d
}

// refill refills the buckets of the limits set (the short ones too when
// short, the short bucket's span, is set).
func (st *limitState) refill(now time.Time, lim Limits, short time.Duration) {
	if lim.RPM > 0 {
		st.requests.refill(now, lim.RPM, time.Minute)
		if short > 0 {
			st.shortReq.refill(now, lim.RPM, short)
		}
	}
	if lim.TPM > 0 {
		st.tokens.refill(now, lim.TPM, time.Minute)
		if short > 0 {
			st.shortTok.refill(now, lim.TPM, short)
		}
	}
}

// decide admits a (charging its request and tokens, taking a concurrency
// slot) or sets d's refusal reason and wait; a refused request is charged
// its request, except a held burst.
func (st *limitState) decide(now time.Time, lim Limits, a Admission, short bool, d *Decision) {
	hasRPM, hasTPM := lim.RPM > 0, lim.TPM > 0
	tokens := float64(a.Tokens)
	chargeRPM := func() {
		if hasRPM {
			st.requests.level--
			if short {
				st.shortReq.level--
			}
		}
	}
	switch {
	case hasRPM && st.requests.level < 1-eps:
		d.Reason = ReasonRequests
		d.RetryAfter = st.requests.wait(1)
	case hasRPM && short && st.shortReq.level < 1-eps:
		d.Reason = ReasonRequests
		d.RetryAfter = st.shortReq.wait(1)
	case hasTPM && a.Tokens > lim.TPM:
		chargeRPM()
		d.Reason = ReasonTooLarge
	case hasTPM && st.tokens.level < tokens-eps:
		chargeRPM()
		d.Reason = ReasonTokens
		d.RetryAfter = st.tokens.wait(tokens)
	case hasTPM && short && st.shortTok.level < st.shortTok.need(tokens)-eps:
		chargeRPM()
		d.Reason = ReasonTokens
		d.RetryAfter = st.shortTok.wait(st.shortTok.need(tokens))
	case lim.MaxConcurrency > 0 && st.inFlight >= lim.MaxConcurrency:
		chargeRPM()
		d.Reason = ReasonConcurrency
		d.RetryAfter = time.Second
	case lim.BurstGrowth > 0 && st.burstCount+1 > max(lim.BurstFloor, lim.BurstGrowth*st.burstPrev):
		if !a.HoldOnBurst {
			chargeRPM()
		}
		d.Reason = ReasonBurst
		d.RetryAfter = time.Unix(st.burstSecond+1, 0).Sub(now)
	default:
		chargeRPM()
		if hasTPM {
			st.tokens.level -= tokens
			if short {
				st.shortTok.level -= tokens
			}
		}
		st.inFlight++
		st.burstCount++
		d.Allowed = true
	}
}

func (st *limitState) rollBurst(now time.Time) {
	sec := now.Unix()
	switch {
	case sec == st.burstSecond:
	case sec == st.burstSecond+1:
		st.burstPrev, st.burstCount, st.burstSecond = st.burstCount, 0, sec
	case sec > st.burstSecond:
		st.burstPrev, st.burstCount, st.burstSecond = 0, 0, sec
	}
}

// Release frees the concurrency slot of an admitted request.
func (l *Limiter) Release(key, model string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if st := l.states[limitKey{key, model}]; st != nil && st.inFlight > 0 {
		st.inFlight--
	}
}

// Refund returns tokens to the TPM buckets of (key, model), never above
// their capacity (Config.TrueUp).
func (l *Limiter) Refund(key, model string, tokens int64) {
	if tokens <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.states[limitKey{key, model}]
	if st == nil {
		return
	}
	for _, b := range []*bucket{&st.tokens, &st.shortTok} {
		if !b.last.IsZero() {
			b.level = min(b.capacity, b.level+float64(tokens))
		}
	}
}
