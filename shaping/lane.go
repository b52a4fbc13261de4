package shaping

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
)

// Lane defaults.
const (
	// LaneConcurrencyDefault is the concurrency limit of rpm and shape, and
	// the initial limit of adaptive.
	LaneConcurrencyDefault = 16
	// LaneMaxConcurrencyDefault is adaptive's upper bound.
	LaneMaxConcurrencyDefault = 512
	// LaneMaxOutputDefault is reserved for a request that sets no maximum
	// output (seed 001: a configured cap, never the model's maximum).
	LaneMaxOutputDefault = 1024
	// LaneWarmUpDefault is the warm-up of shape and adaptive.
	LaneWarmUpDefault = 10 * time.Second
	// LanePauseDefault is how long a 429 without Retry-After pauses the lane.
	LanePauseDefault = time.Second
)

// Unit is what a [Quota] counts.
type Unit int

const (
	// UnitRequests charges 1 per request.
	UnitRequests Unit = iota
	// UnitTokens charges the request's reserved tokens, settled after.
	UnitTokens
)

// Quota is an extra bucket an admission must pass: a tenant, project or API
// key quota, possibly shared by many lanes.
type Quota struct {
	Bucket *Bucket
	Unit   Unit
}

// Settlement says what happens to reserved tokens when the usage is known.
type Settlement int

const (
	// SettleActual corrects the reservation to the real usage (seeds 000
	// and 001): unused max output is given back, an overrun is taken.
	SettleActual Settlement = iota
	// SettleReserved keeps the reservation, as OpenAI counts max_tokens
	// whatever the output.
	SettleReserved
)

// LaneConfig configures a [Lane]: one (API key, model) pair.
type LaneConfig struct {
	// Name labels the lane, e.g. "key1/gpt-4o-mini". Optional.
	Name string
	// Strategy is the admission strategy. Default: DefaultStrategy(RPM, TPM).
	Strategy Strategy
	// RPM is the requests-per-minute quota; 0 = unknown (adaptive learns it
	// from headers). Ignored by retry.
	RPM float64
	// TPM is the tokens-per-minute quota; 0 = unknown. Used by shape and
	// adaptive.
	TPM float64
	// Concurrency is the fixed limit of rpm and shape and the initial limit
	// of adaptive. Default LaneConcurrencyDefault.
	Concurrency int
	// MaxConcurrency bounds adaptive. Default LaneMaxConcurrencyDefault.
	MaxConcurrency int
	// MinInterval is the pacing between sends inside the slot. Default: one
	// RPM period (60s/RPM) for shape and adaptive when RPM is known, else
	// none; -1 disables.
	MinInterval time.Duration
	// WarmUp ramps the RPM and TPM refill from 0 over this time. Default
	// LaneWarmUpDefault for shape and adaptive, none for rpm; -1 disables.
	WarmUp time.Duration
	// Start is the buckets' initial level. Default StartDefault (empty with
	// warm-up, full without).
	Start BucketStart
	// DefaultMaxOutput is reserved when a request sets no max output.
	// Default LaneMaxOutputDefault.
	DefaultMaxOutput int
	// Settlement is what Done does with the reserved tokens. Default
	// SettleActual.
	Settlement Settlement
	// Controller computes adaptive's concurrency limit. Default: an
	// [Elastic] starting at Concurrency, bounded by MaxConcurrency.
	Controller Controller
	// Quotas are further buckets every admission of this lane passes.
	Quotas []Quota
	// PauseDefault is how long a 429 without Retry-After pauses the lane.
	// Default LanePauseDefault.
	PauseDefault time.Duration
	// Clock is the time source of Admit and Done. Default
	// clockwork.NewRealClock().
	Clock Clock
}

// WithDefaults returns c with the defaults applied.
func (c LaneConfig) WithDefaults() LaneConfig {
	c.Strategy = cmp.Or(c.Strategy, DefaultStrategy(c.RPM, c.TPM))
	c.Concurrency = cmp.Or(c.Concurrency, LaneConcurrencyDefault)
	c.MaxConcurrency = cmp.Or(c.MaxConcurrency, max(LaneMaxConcurrencyDefault, c.Concurrency))
	shaped := c.Strategy == StrategyShape || c.Strategy == StrategyAdaptive
	if c.MinInterval == 0 && shaped && c.RPM > 0 {
		c.MinInterval = time.Duration(float64(time.Minute) / c.RPM)
	}
	if c.WarmUp == 0 && shaped {
		c.WarmUp = LaneWarmUpDefault
	}
	c.DefaultMaxOutput = cmp.Or(c.DefaultMaxOutput, LaneMaxOutputDefault)
	c.PauseDefault = cmp.Or(c.PauseDefault, LanePauseDefault)
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	return c
}

func (c LaneConfig) validate() error {
	if _, err := ParseStrategy(string(c.Strategy)); err != nil {
		return fmt.Errorf("%w: LaneConfig.Strategy: %w", ErrInvalidConfig, err)
	}
	switch {
	case c.RPM < 0 || math.IsInf(c.RPM, 0) || math.IsNaN(c.RPM):
		return fmt.Errorf("%w: LaneConfig.RPM must be >= 0, got %v", ErrInvalidConfig, c.RPM)
	case c.TPM < 0 || math.IsInf(c.TPM, 0) || math.IsNaN(c.TPM):
		return fmt.Errorf("%w: LaneConfig.TPM must be >= 0, got %v", ErrInvalidConfig, c.TPM)
	case c.Strategy == StrategyRPM && c.RPM == 0:
		return fmt.Errorf("%w: LaneConfig.RPM is required by strategy rpm", ErrInvalidConfig)
	case c.Strategy == StrategyShape && c.RPM == 0 && c.TPM == 0:
		return fmt.Errorf("%w: LaneConfig.RPM or TPM is required by strategy shape", ErrInvalidConfig)
	case c.Concurrency < 1:
		return fmt.Errorf("%w: LaneConfig.Concurrency must be >= 1, got %d", ErrInvalidConfig, c.Concurrency)
	case c.MaxConcurrency < c.Concurrency:
		return fmt.Errorf("%w: LaneConfig.MaxConcurrency %d below Concurrency %d", ErrInvalidConfig, c.MaxConcurrency, c.Concurrency)
	case c.MinInterval < -1 || c.WarmUp < -1:
		return fmt.Errorf("%w: LaneConfig.MinInterval and WarmUp must be >= -1", ErrInvalidConfig)
	case c.DefaultMaxOutput < 1:
		return fmt.Errorf("%w: LaneConfig.DefaultMaxOutput must be >= 1, got %d", ErrInvalidConfig, c.DefaultMaxOutput)
	case c.Settlement != SettleActual && c.Settlement != SettleReserved:
		return fmt.Errorf("%w: LaneConfig.Settlement unknown value %d", ErrInvalidConfig, c.Settlement)
	case c.PauseDefault < 0:
		return fmt.Errorf("%w: LaneConfig.PauseDefault must be >= 0, got %v", ErrInvalidConfig, c.PauseDefault)
	}
	for i, q := range c.Quotas {
		if q.Bucket == nil {
			return fmt.Errorf("%w: LaneConfig.Quotas[%d].Bucket is nil", ErrInvalidConfig, i)
		}
	}
	return nil
}

// Request is what one admission asks for.
type Request struct {
	// PromptTokens is the estimated prompt size (see [Estimator]).
	PromptTokens int
	// MaxOutputTokens is the request's max output (n x max_tokens);
	// 0 = unset, LaneConfig.DefaultMaxOutput is reserved.
	MaxOutputTokens int
	// Quotas are further buckets for this request only (its tenant's).
	Quotas []Quota
}

// Outcome is how a sent request ended, for [Permit.Done].
type Outcome struct {
	// PromptTokens and CompletionTokens are the real usage; both 0 means
	// unknown, and the reservation is kept.
	PromptTokens, CompletionTokens int
	// Latency is send to last byte; 0 = measured by the lane's clock.
	Latency time.Duration
	// RateLimited is a 429: the whole lane pauses for Headers.RetryAfter
	// (or LaneConfig.PauseDefault) and the controller drains.
	RateLimited bool
	// Overloaded is a 503 or timeout: a congestion drop for the
	// controller, without a pause.
	Overloaded bool
	// Headers are the response's rate-limit headers ([ParseHeaders]).
	Headers RateLimitHeaders
}

// maxInline is how many bucket claims a Reservation holds without allocating.
const maxInline = 3

// Reservation is an admitted claim on every bucket of a lane, made by
// [Lane.ReserveAt]. It belongs to the lane that made it: pass it only to
// that lane's methods.
type Reservation struct {
	// ReadyAt is when all buckets (and any pause) allow the send.
	ReadyAt time.Time
	// Tokens is the number of tokens reserved (prompt + max output).
	Tokens int
	claims [maxInline]Claim
	n      int
	extra  []Claim
}

func (r *Reservation) add(c Claim) {
	if r.n < maxInline {
		r.claims[r.n] = c
		r.n++
		return
	}
	r.extra = append(r.extra, c)
}

// lists returns r's claims as (at most) two slices, without allocating.
func (r *Reservation) lists() [2][]Claim { return [2][]Claim{r.claims[:r.n], r.extra} }

// Lane is the admission control of one (API key, model) pair: the buckets,
// the concurrency limiter, the pacer, the adaptive controller and the
// calibration from the server's headers, in the seeds' order. It is safe for
// concurrent use.
//
// The core methods (ReserveAt, CancelAt, TryAcquireSlot, PaceAt, SendAt,
// [Permit.DoneAt]) take the time explicitly and never block; [Lane.Admit]
// and [Permit.Done] are the waiting layer on the configured Clock.
type Lane struct {
	cfg   LaneConfig
	clock Clock
	slots *ConcurrencyLimiter
	pacer *Pacer

	// mu guards the fields below, and also the state of rpm and tpm: the
	// lane owns them (they are never shared and never leave the package),
	// every access to them holds mu, so the admission path does not take
	// their own locks. Quota buckets may be shared: they are locked, after
	// mu, in bucket id order.
	mu         sync.Mutex
	rpm, tpm   *Bucket
	ctrl       Controller
	pauseUntil time.Time
	// limitsAt is the send time of the response whose limit headers were
	// applied last; older responses' limits are stale.
	limitsAt time.Time
	// ledger, for calibration: all-time sums of requests and tokens
	// reserved, cancelled, and sent.
	resReq, resTok, canReq, canTok, sentReq, sentTok float64
	// refTok is the all-time sum of tokens settlement gave back to the TPM
	// bucket (negative for overruns).
	refTok float64

	admitted, rateLimited atomic.Uint64
}

// NewLane returns a lane created at cfg.Clock.Now().
func NewLane(cfg LaneConfig) (*Lane, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	now := cfg.Clock.Now()
	l := &Lane{cfg: cfg, clock: cfg.Clock, pacer: NewPacer(max(0, cfg.MinInterval))}
	warm := max(0, cfg.WarmUp)
	var err error
	switch cfg.Strategy {
	case StrategyRetry:
		l.slots = NewConcurrencyLimiter(math.MaxInt32)
		return l, nil
	}
	if cfg.RPM > 0 {
		if l.rpm, err = NewBucket(BucketConfig{Name: "rpm", Limit: cfg.RPM, WarmUp: warm, Start: cfg.Start}, now); err != nil {
			return nil, err
		}
	}
	if cfg.TPM > 0 && cfg.Strategy != StrategyRPM {
		if l.tpm, err = NewBucket(BucketConfig{Name: "tpm", Limit: cfg.TPM, WarmUp: warm, Start: cfg.Start}, now); err != nil {
			return nil, err
		}
	}
	l.slots = NewConcurrencyLimiter(cfg.Concurrency)
	if cfg.Strategy == StrategyAdaptive {
		l.ctrl = cfg.Controller
		if l.ctrl == nil {
			if l.ctrl, err = NewElastic(ElasticConfig{Initial: cfg.Concurrency, Max: cfg.MaxConcurrency}); err != nil {
				return nil, err
			}
		}
		if g, ok := l.ctrl.(Guided); ok {
			g.SetGuide(cfg.RPM, cfg.TPM)
		}
		l.slots.SetLimit(l.ctrl.Limit())
	}
	return l, nil
}

// Strategy returns the lane's strategy.
func (l *Lane) Strategy() Strategy { return l.cfg.Strategy }

// Clock returns the lane's clock.
func (l *Lane) Clock() Clock { return l.clock }

// tokensFor is the reservation of req: prompt plus max output.
func (l *Lane) tokensFor(req Request) int {
	out := req.MaxOutputTokens
	if out <= 0 {
		out = l.cfg.DefaultMaxOutput
	}
	return max(0, req.PromptTokens) + out
}

// ReserveAt reserves req in every bucket of the lane together (RPM, TPM, the
// lane's and the request's quotas), or in none. It never blocks: the
// returned ReadyAt says when to proceed. It fails with [ErrTooLarge] when a
// bucket can never hold the request.
func (l *Lane) ReserveAt(now time.Time, req Request) (Reservation, error) {
	var res Reservation
	err := l.reserve(now, req, time.Time{}, &res)
	return res, err
}

// ReserveBeforeAt is ReserveAt that reserves nothing and fails with a
// [*WaitError] when the request would not be ready by deadline.
func (l *Lane) ReserveBeforeAt(now time.Time, req Request, deadline time.Time) (Reservation, error) {
	var res Reservation
	err := l.reserve(now, req, deadline, &res)
	return res, err
}

type charge struct {
	b    *Bucket
	cost float64
	// share is how many times the request's token count is in cost.
	share   float64
	ready   float64
	readyAt time.Time
}

// reserve fills *res, which must be zero; on error it stays zero.
func (l *Lane) reserve(now time.Time, req Request, deadline time.Time, res *Reservation) error {
	tokens := l.tokensFor(req)
	l.mu.Lock()
	err := l.reserveLocked(now, tokens, req.Quotas, deadline, res)
	l.mu.Unlock()
	return err
}

// reserveLocked is reserve with l.mu held.
func (l *Lane) reserveLocked(now time.Time, tokens int, quotas []Quota, deadline time.Time, res *Reservation) error {
	if l.cfg.Strategy == StrategyRetry {
		res.ReadyAt, res.Tokens = now, tokens
		return nil
	}
	if len(l.cfg.Quotas) > 0 || len(quotas) > 0 {
		return l.reserveSharedLocked(now, tokens, quotas, deadline, res)
	}
	if l.rpm == nil || l.tpm == nil {
		var own [1]charge
		cs := own[:0]
		if l.rpm != nil {
			cs = append(cs, charge{b: l.rpm, cost: 1})
		}
		if l.tpm != nil {
			cs = append(cs, charge{b: l.tpm, cost: float64(tokens), share: 1})
		}
		return l.chargeLocked(now, tokens, cs, deadline, res)
	}
	return l.chargeOwnLocked(now, tokens, deadline, res)
}

// chargeOwnLocked is chargeLocked for a lane with both an RPM and a TPM
// bucket and no quota, the common case: only the lane's own buckets,
// guarded by l.mu, so no bucket lock and no charge list.
func (l *Lane) chargeOwnLocked(now time.Time, tokens int, deadline time.Time, res *Reservation) error {
	rpm, tpm := l.rpm, l.tpm
	cost := float64(tokens)
	sr := rpm.rel(now)
	st := sr
	if tpm.origin != rpm.origin {
		st = tpm.rel(now)
	}
	// Peek in id order, as chargeLocked does.
	var rr, rt float64
	var ir, it bool
	var err error
	if rpm.id < tpm.id {
		if rr, ir, err = rpm.peekRel(sr, 1); err == nil {
			rt, it, err = tpm.peekRel(st, cost)
		}
	} else if rt, it, err = tpm.peekRel(st, cost); err == nil {
		rr, ir, err = rpm.peekRel(sr, 1)
	}
	if err != nil {
		return fmt.Errorf("shaping: lane %q: %w", l.cfg.Name, err)
	}
	ready := now
	if l.pauseUntil.After(ready) {
		ready = l.pauseUntil
	}
	atR, atT := now, now
	if !ir {
		if atR = rpm.abs(rr); atR.After(ready) {
			ready = atR
		}
	}
	if !it {
		if atT = tpm.abs(rt); atT.After(ready) {
			ready = atT
		}
	}
	if !deadline.IsZero() && ready.After(deadline) {
		return &WaitError{Wait: ready.Sub(now), Deadline: deadline}
	}
	rpm.level--
	rpm.lastEvent = max(rpm.lastEvent, rr)
	rpm.seq++
	tpm.level -= cost
	tpm.lastEvent = max(tpm.lastEvent, rt)
	tpm.seq++
	res.ReadyAt, res.Tokens, res.n = ready, tokens, 2
	cr, ct := &res.claims[0], &res.claims[1]
	if tpm.id < rpm.id {
		cr, ct = ct, cr
	}
	cr.bucket, cr.Tokens, cr.ReadyAt, cr.seq = rpm, 1, atR, rpm.seq
	ct.bucket, ct.Tokens, ct.ReadyAt, ct.share, ct.seq = tpm, cost, atT, 1, tpm.seq
	l.resReq++
	l.resTok += cost
	return nil
}

// reserveSharedLocked is reserveLocked with quotas: the quota buckets may be
// shared with other lanes, so every bucket is locked, in id order.
func (l *Lane) reserveSharedLocked(now time.Time, tokens int, quotas []Quota, deadline time.Time, res *Reservation) error {
	var inline [8]charge
	cs := inline[:0]
	if l.rpm != nil {
		cs = append(cs, charge{b: l.rpm, cost: 1})
	}
	if l.tpm != nil {
		cs = append(cs, charge{b: l.tpm, cost: float64(tokens), share: 1})
	}
	for _, qs := range [2][]Quota{l.cfg.Quotas, quotas} {
		for _, q := range qs {
			c := charge{b: q.Bucket, cost: 1}
			if q.Unit == UnitTokens {
				c.cost, c.share = float64(tokens), 1
			}
			cs = append(cs, c)
		}
	}
	cs = sortCharges(cs)
	for _, c := range cs {
		c.b.mu.Lock()
	}
	err := l.chargeLocked(now, tokens, cs, deadline, res)
	for _, c := range cs {
		c.b.mu.Unlock()
	}
	return err
}

// chargeLocked reserves cs (in lock order, all locked or owned) into *res,
// or nothing. Buckets with the same origin share one time conversion.
func (l *Lane) chargeLocked(now time.Time, tokens int, cs []charge, deadline time.Time, res *Reservation) error {
	ready := now
	if l.pauseUntil.After(ready) {
		ready = l.pauseUntil
	}
	var s float64
	var origin time.Time
	for i := range cs {
		c := &cs[i]
		if i == 0 || c.b.origin != origin {
			origin, s = c.b.origin, c.b.rel(now)
		}
		r, imm, err := c.b.peekRel(s, c.cost)
		if err != nil {
			return fmt.Errorf("shaping: lane %q: %w", l.cfg.Name, err)
		}
		c.ready, c.readyAt = r, now
		if !imm {
			c.readyAt = c.b.abs(r)
			if c.readyAt.After(ready) {
				ready = c.readyAt
			}
		}
	}
	if !deadline.IsZero() && ready.After(deadline) {
		return &WaitError{Wait: ready.Sub(now), Deadline: deadline}
	}
	res.ReadyAt, res.Tokens = ready, tokens
	for i := range cs {
		c := &cs[i]
		b := c.b
		b.level -= c.cost
		b.lastEvent = max(b.lastEvent, c.ready)
		b.seq++
		res.add(Claim{bucket: b, Tokens: c.cost, ReadyAt: c.readyAt, share: c.share, seq: b.seq})
	}
	if l.rpm != nil {
		l.resReq++
	}
	if l.tpm != nil {
		l.resTok += float64(tokens)
	}
	return nil
}

// sortCharges orders charges by bucket id (the global lock order) and merges
// duplicates.
func sortCharges(cs []charge) []charge {
	for i := 1; i < len(cs); i++ {
		for j := i; j > 0 && cs[j].b.id < cs[j-1].b.id; j-- {
			cs[j], cs[j-1] = cs[j-1], cs[j]
		}
	}
	out := cs[:0]
	for _, c := range cs {
		if n := len(out); n > 0 && out[n-1].b == c.b {
			out[n-1].cost += c.cost
			out[n-1].share += c.share
			continue
		}
		out = append(out, c)
	}
	return out
}

// ReadyAt returns when r may proceed, given what was learned since it was
// made: a 429 pause, or a bucket corrected from the server's headers, which
// moves the ready times of queued reservations later. It is r.ReadyAt when
// nothing changed.
func (l *Lane) ReadyAt(r *Reservation) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	ready := r.ReadyAt
	for _, cs := range r.lists() {
		for _, c := range cs {
			if at := c.bucket.ReadyAt(c); at.After(ready) {
				ready = at
			}
		}
	}
	if l.pauseUntil.After(ready) {
		ready = l.pauseUntil
	}
	return ready
}

// CancelAt gives back the tokens of a reservation that will not be sent.
func (l *Lane) CancelAt(now time.Time, r *Reservation) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, cs := range r.lists() {
		for _, c := range cs {
			c.bucket.CancelAt(now, c)
		}
	}
	if l.rpm != nil && r.n > 0 {
		l.canReq++
	}
	if l.tpm != nil && r.n > 0 {
		l.canTok += float64(r.Tokens)
	}
	r.n, r.extra = 0, nil
}

// TryAcquireSlot takes a concurrency slot if one is free.
func (l *Lane) TryAcquireSlot() bool { return l.slots.TryAcquire() }

// ReleaseSlot returns a slot taken by TryAcquireSlot for a request that will
// not be sent.
func (l *Lane) ReleaseSlot() { l.slots.Release() }

// PaceAt books a send inside the slot and returns when it may go.
func (l *Lane) PaceAt(now time.Time) time.Time { return l.pacer.ReserveAt(now) }

// PausedUntil returns the end of the current 429 pause (zero if none).
func (l *Lane) PausedUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pauseUntil
}

// TickAt runs the controller's time-driven rules and applies its limit.
func (l *Lane) TickAt(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tickLocked(now)
}

func (l *Lane) tickLocked(now time.Time) {
	if l.ctrl != nil {
		l.slots.SetLimit(l.ctrl.Tick(now))
	}
}

// SendAt records that a reservation holding a slot is sent at now and
// returns its permit.
func (l *Lane) SendAt(now time.Time, r Reservation) *Permit {
	p := l.send(now, &r)
	return &p
}

func (l *Lane) send(now time.Time, r *Reservation) Permit {
	rec := permitPool.Get().(*permitRec)
	l.mu.Lock()
	if l.rpm != nil {
		l.sentReq++
	}
	if l.tpm != nil {
		l.sentTok += float64(r.Tokens)
	}
	rec.res, rec.inFlight = *r, l.slots.InFlight()
	rec.markReq, rec.markTok, rec.markRef = l.sentReq, l.sentTok, l.refTok
	l.mu.Unlock()
	l.admitted.Add(1)
	return Permit{lane: l, rec: rec, gen: rec.gen.Load(), tokens: r.Tokens, sentAt: now}
}

// Admit waits, in the seeds' order, for every bucket (all together), then a
// concurrency slot, then the pacing inside the slot, and returns the permit
// to send. It never waits long while holding a slot: a lane pause that
// begins meanwhile gives the slot back first. It fails at once with a
// [*WaitError] when the buckets or a pause would pass ctx's deadline, with
// [ErrTooLarge] (permanent) when the request can never fit, and with ctx's
// cause if ctx ends while waiting; then nothing stays reserved.
//
// When nothing waits, Admit takes the lane's lock twice (tick and reserve
// together, then the send), allocates nothing and returns a Permit by value.
func (l *Lane) Admit(ctx context.Context, req Request) (Permit, error) {
	now := l.clock.Now()
	deadline, _ := ctx.Deadline()
	tokens := l.tokensFor(req)
	var r Reservation
	l.mu.Lock()
	l.tickLocked(now)
	err := l.reserveLocked(now, tokens, req.Quotas, deadline, &r)
	l.mu.Unlock()
	if err != nil {
		return Permit{}, err
	}
	// r.ReadyAt includes the pause as of the reservation: when it is not
	// after now, the first bucket and pause checks below would pass.
	waited := r.ReadyAt.After(now)
	for waited {
		ready := l.ReadyAt(&r)
		if !ready.After(l.clock.Now()) {
			break
		}
		if !deadline.IsZero() && ready.After(deadline) {
			return l.abandon(&r, &WaitError{Wait: ready.Sub(l.clock.Now()), Deadline: deadline})
		}
		if err := sleepUntil(ctx, l.clock, ready); err != nil {
			return l.abandon(&r, err)
		}
	}
	for {
		if waited {
			if until := l.PausedUntil(); until.After(l.clock.Now()) {
				if !deadline.IsZero() && until.After(deadline) {
					now := l.clock.Now()
					return l.abandon(&r, &WaitError{Wait: until.Sub(now), Deadline: deadline})
				}
				if err := sleepUntil(ctx, l.clock, until); err != nil {
					return l.abandon(&r, err)
				}
			}
		}
		waited = true
		if err := l.slots.Acquire(ctx); err != nil {
			return l.abandon(&r, err)
		}
		now = l.clock.Now()
		if !l.PausedUntil().After(now) {
			break
		}
		l.slots.Release()
	}
	at := l.pacer.ReserveAt(now)
	if at.After(now) {
		err = sleepUntil(ctx, l.clock, at)
		now = l.clock.Now()
	} else {
		err = ctx.Err()
	}
	if err != nil {
		l.pacer.CancelAt(at)
		l.slots.Release()
		return l.abandon(&r, err)
	}
	return l.send(now, &r), nil
}

// abandon gives back r for an Admit that fails with err.
func (l *Lane) abandon(r *Reservation, err error) (Permit, error) {
	l.CancelAt(l.clock.Now(), r)
	return Permit{}, err
}

// ObserveAt applies headers that arrived at now outside a permit (for
// example on a request llmq did not shape) to the lane's buckets.
func (l *Lane) ObserveAt(now time.Time, h RateLimitHeaders) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calibrateLocked(now, now, l.sentReq, l.sentTok, l.refTok, h)
}

// Observe is ObserveAt on the lane's clock.
func (l *Lane) Observe(h RateLimitHeaders) { l.ObserveAt(l.clock.Now(), h) }

// calibrateLocked makes the server the source of truth: a limit header
// replaces (or, for adaptive, creates) the bucket's limit, and a remaining
// header lowers the level to what the server had at `at` plus the refill
// and the settlements since, minus what this lane reserved that the server
// had not yet seen.
// It never raises a level, so stale or reordered headers stay safe.
func (l *Lane) calibrateLocked(now, at time.Time, markReq, markTok, markRef float64, h RateLimitHeaders) {
	if l.cfg.Strategy == StrategyRetry {
		return
	}
	learn := l.cfg.Strategy == StrategyAdaptive
	if at.Before(l.limitsAt) {
		h.HasLimitRequests, h.HasLimitTokens = false, false
	} else if h.HasLimitRequests || h.HasLimitTokens {
		l.limitsAt = at
	}
	if h.HasLimitRequests && h.LimitRequests > 0 {
		l.rpm = l.learnLocked(now, l.rpm, "rpm", h.LimitRequests, learn)
		if l.cfg.MinInterval == 0 && l.rpm != nil {
			l.pacer.SetInterval(time.Duration(float64(time.Minute) / l.rpm.Limit()))
		}
	}
	if h.HasLimitTokens && h.LimitTokens > 0 && l.cfg.Strategy != StrategyRPM {
		l.tpm = l.learnLocked(now, l.tpm, "tpm", h.LimitTokens, learn)
	}
	if g, ok := l.ctrl.(Guided); ok {
		var rpm, tpm float64
		if l.rpm != nil {
			rpm = l.rpm.Limit()
		}
		if l.tpm != nil {
			tpm = l.tpm.Limit()
		}
		g.SetGuide(rpm, tpm)
	}
	if h.HasRemainingRequests && l.rpm != nil {
		l.rpm.lowerSince(now, at, h.RemainingRequests, l.resReq-l.canReq-markReq)
	}
	if h.HasRemainingTokens && l.tpm != nil {
		l.tpm.lowerSince(now, at, h.RemainingTokens+l.refTok-markRef, l.resTok-l.canTok-markTok)
	}
}

func (l *Lane) learnLocked(now time.Time, b *Bucket, name string, limit float64, create bool) *Bucket {
	if b == nil {
		if !create {
			return nil
		}
		nb, err := NewBucket(BucketConfig{Name: name, Limit: limit, Start: StartFull}, now)
		if err != nil {
			return nil
		}
		return nb
	}
	if old := b.Limit(); math.Abs(old-limit) >= 0.5 {
		ratio := b.Capacity() / old
		_ = b.SetLimitAt(now, limit)
		_ = b.SetCapacityAt(now, limit*ratio)
	}
	return b
}

// Snapshot is a lane's state for metrics.
type Snapshot struct {
	Name             string
	Strategy         Strategy
	Buckets          []BucketSnapshot
	ConcurrencyLimit int
	InFlight         int
	Waiting          int
	PausedUntil      time.Time
	// State is the controller's state ("probing", "hold", "drain"), or "".
	State string
	// Admitted counts permits issued; RateLimited counts 429 outcomes.
	Admitted, RateLimited uint64
}

// BucketSnapshot is one bucket's state.
type BucketSnapshot struct {
	Name                   string
	Level, Capacity, Limit float64
}

// SnapshotAt returns the lane's state at now.
func (l *Lane) SnapshotAt(now time.Time) Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Snapshot{
		Name: l.cfg.Name, Strategy: l.cfg.Strategy,
		ConcurrencyLimit: l.slots.Limit(), InFlight: l.slots.InFlight(), Waiting: l.slots.Waiting(),
		PausedUntil: l.pauseUntil, Admitted: l.admitted.Load(), RateLimited: l.rateLimited.Load(),
	}
	if st, ok := l.ctrl.(Stateful); ok {
		s.State = st.State()
	}
	add := func(b *Bucket) {
		s.Buckets = append(s.Buckets, BucketSnapshot{Name: b.Name(), Level: b.LevelAt(now), Capacity: b.Capacity(), Limit: b.Limit()})
	}
	for _, b := range []*Bucket{l.rpm, l.tpm} {
		if b != nil {
			add(b)
		}
	}
	for _, q := range l.cfg.Quotas {
		add(q.Bucket)
	}
	return s
}

// Snapshot is SnapshotAt on the lane's clock.
func (l *Lane) Snapshot() Snapshot { return l.SnapshotAt(l.clock.Now()) }

// Permit is an admitted request: a small handle, passed by value. Exactly
// one of Done or Cancel must follow; after that the permit (and every copy
// of it) is spent: Done fails with [ErrPermitDone] and Cancel does nothing.
// The zero Permit is spent.
type Permit struct {
	lane   *Lane
	rec    *permitRec
	gen    uint64
	tokens int
	sentAt time.Time
}

// permitRec is the state of a permit in flight. Records are recycled: the
// generation counter, advanced once by Done or Cancel, tells a spent handle
// from the live one, so a stale copy never touches a recycled record.
type permitRec struct {
	gen              atomic.Uint64
	res              Reservation
	inFlight         int
	markReq, markTok float64
	markRef          float64
}

var permitPool = sync.Pool{New: func() any { return new(permitRec) }}

// claim spends p, reporting false when it was spent already.
func (p Permit) claim() bool {
	return p.rec != nil && p.rec.gen.CompareAndSwap(p.gen, p.gen+1)
}

// recycle returns a claimed record to the pool.
func (r *permitRec) recycle() {
	r.res = Reservation{}
	permitPool.Put(r)
}

// Tokens returns the tokens reserved for the request.
func (p Permit) Tokens() int { return p.tokens }

// SentAt returns when the permit was issued.
func (p Permit) SentAt() time.Time { return p.sentAt }

// Cancel gives everything back for a request that was not sent.
func (p Permit) Cancel() {
	if !p.claim() {
		return
	}
	l := p.lane
	l.slots.Release()
	l.CancelAt(l.clock.Now(), &p.rec.res)
	p.rec.recycle()
}

// Done is DoneAt on the lane's clock.
func (p Permit) Done(o Outcome) error {
	if p.lane == nil {
		return ErrPermitDone
	}
	return p.DoneAt(p.lane.clock.Now(), o)
}

// DoneAt ends a sent request at now: it releases the slot, settles the
// tokens to the real usage (per LaneConfig.Settlement), calibrates the
// buckets from the headers, pauses the whole lane on a 429 until the
// advertised Retry-After, and feeds the adaptive controller.
func (p Permit) DoneAt(now time.Time, o Outcome) error {
	if !p.claim() {
		return ErrPermitDone
	}
	rec, l := p.rec, p.lane
	l.slots.Release()
	latency := o.Latency
	if latency <= 0 {
		latency = now.Sub(p.sentAt)
	}
	actual := o.PromptTokens + o.CompletionTokens
	l.mu.Lock()
	if actual > 0 && !o.RateLimited && l.cfg.Settlement == SettleActual {
		delta := float64(rec.res.Tokens - actual)
		for _, cs := range rec.res.lists() {
			for _, c := range cs {
				if c.share > 0 {
					c.bucket.AdjustAt(now, c.share*delta)
				}
			}
		}
		if l.tpm != nil {
			l.refTok += delta
		}
	}
	l.calibrateLocked(now, p.sentAt, rec.markReq, rec.markTok, rec.markRef, o.Headers)
	if o.RateLimited {
		l.rateLimited.Add(1)
	}
	if o.RateLimited && l.cfg.Strategy != StrategyRetry {
		wait := l.cfg.PauseDefault
		if o.Headers.HasRetryAfter {
			wait = o.Headers.RetryAfter
		}
		if until := now.Add(wait); until.After(l.pauseUntil) {
			l.pauseUntil = until
		}
	}
	if l.ctrl != nil {
		l.slots.SetLimit(l.ctrl.Update(Sample{
			At: now, Latency: latency, Tokens: actual, OutputTokens: o.CompletionTokens,
			InFlight: rec.inFlight, Dropped: o.RateLimited || o.Overloaded,
		}))
	}
	l.mu.Unlock()
	rec.recycle()
	return nil
}
