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

// BucketStart says how full a [Bucket] is when it is created.
type BucketStart int

const (
	// StartDefault is StartFull without warm-up and StartEmpty with warm-up.
	StartDefault BucketStart = iota
	// StartFull starts at capacity: a service can send a full burst at once.
	StartFull
	// StartEmpty starts at zero: the first tokens arrive at the refill rate.
	StartEmpty
)

// BucketPerDefault is the default refill period of [BucketConfig.Limit].
const BucketPerDefault = time.Minute

// BucketConfig configures a [Bucket].
type BucketConfig struct {
	// Name labels the bucket in errors and snapshots ("rpm", "tpm",
	// "tenant:acme"). Optional.
	Name string
	// Limit is how many tokens refill per Per (an RPM or TPM quota).
	// Required, > 0.
	Limit float64
	// Per is the period of Limit. Default BucketPerDefault (one minute).
	Per time.Duration
	// Capacity is the most tokens the bucket holds, and so the largest
	// single request it accepts. Default (0): Limit, one period's worth.
	Capacity float64
	// WarmUp ramps the refill rate linearly from 0 to Limit/Per over this
	// duration after creation (the cumulative formula of
	// docs/design/rate-limiting.md). 0 = no warm-up.
	WarmUp time.Duration
	// Start is the initial level. Default StartDefault.
	Start BucketStart
}

// WithDefaults returns c with the defaults applied.
func (c BucketConfig) WithDefaults() BucketConfig {
	c.Per = cmp.Or(c.Per, BucketPerDefault)
	c.Capacity = cmp.Or(c.Capacity, c.Limit)
	if c.Start == StartDefault {
		c.Start = StartFull
		if c.WarmUp > 0 {
			c.Start = StartEmpty
		}
	}
	return c
}

func (c BucketConfig) validate() error {
	switch {
	case !(c.Limit > 0) || math.IsInf(c.Limit, 0):
		return fmt.Errorf("%w: BucketConfig.Limit must be > 0, got %v", ErrInvalidConfig, c.Limit)
	case c.Per < 0:
		return fmt.Errorf("%w: BucketConfig.Per must be >= 0, got %v", ErrInvalidConfig, c.Per)
	case c.Capacity < 0 || math.IsInf(c.Capacity, 0) || math.IsNaN(c.Capacity):
		return fmt.Errorf("%w: BucketConfig.Capacity must be >= 0, got %v", ErrInvalidConfig, c.Capacity)
	case c.WarmUp < 0:
		return fmt.Errorf("%w: BucketConfig.WarmUp must be >= 0, got %v", ErrInvalidConfig, c.WarmUp)
	case c.Start < StartDefault || c.Start > StartEmpty:
		return fmt.Errorf("%w: BucketConfig.Start unknown value %d", ErrInvalidConfig, c.Start)
	}
	return nil
}

var bucketIDs atomic.Uint64

// Bucket is a token bucket with debt: a reservation always succeeds (unless
// larger than the capacity), the level going negative, and waiters are
// served first-in first-out. The refill may ramp up during a warm-up
// (docs/design/rate-limiting.md#bucket). All methods take the time
// explicitly and are safe for concurrent use; several [Lane]s may share a
// Bucket (a tenant or API-key quota).
type Bucket struct {
	id   uint64
	name string
	per  time.Duration

	mu       sync.Mutex
	origin   time.Time // warm-up origin; times below are seconds since it
	rate     float64   // tokens per second at the end of warm-up
	warm     float64   // warm-up seconds
	capacity float64
	// maxN is the largest reservation: the capacity, unless a lane lowered
	// the capacity below the provider's limit (a short-bucket provider, or
	// a share of the quota); a reservation above the capacity then waits
	// for a full bucket and leaves it in debt.
	maxN float64
	// whole: a reservation above the capacity waits for all its tokens
	// (the level back from its debt) instead of a full bucket, for a lane
	// that is the only one spending a short-bucket provider's quota
	// (Lane.applyLocked): the provider's bucket holds the request, the
	// lane's capacity is only what it trusts at once.
	whole     bool
	level     float64
	last      float64 // time of the last refill
	lastEvent float64 // latest ready time handed out
	// credit counts the tokens the refill has brought since the creation,
	// uncapped, moved by the corrections that move the reservations
	// waiting in debt: a level lowered below zero takes from it, a level
	// raised from debt adds to it. A reservation that waits is ready when
	// credit reaches its ticket (see [Claim]), whatever the rate did in
	// between, so corrections of the rate or the level compose without a
	// log. floor is the least ticket of the reservations taken before
	// the last lowering below zero (fixes below floorFixes): it delays
	// even those that were ready, by the tokens it takes off.
	credit, floor float64
	// fixes counts the corrections that move ready times already handed
	// out (a changed rate, a level lowered below zero or raised from it).
	fixes, floorFixes uint64
}

// NewBucket returns a bucket created at now.
func NewBucket(cfg BucketConfig, now time.Time) (*Bucket, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	b := &Bucket{
		id:       bucketIDs.Add(1),
		name:     cfg.Name,
		per:      cfg.Per,
		origin:   now,
		rate:     cfg.Limit / cfg.Per.Seconds(),
		warm:     cfg.WarmUp.Seconds(),
		capacity: cfg.Capacity,
		maxN:     cfg.Capacity,
	}
	if cfg.Start == StartFull {
		b.level = b.capacity
	}
	return b, nil
}

// Claim is a reservation of tokens in one bucket.
type Claim struct {
	bucket *Bucket
	// Tokens is the amount reserved.
	Tokens float64
	// ReadyAt is when the tokens are covered by the refill.
	ReadyAt time.Time
	// share is how many times a lane request's token count is in Tokens
	// (for settlement).
	share float64
	// ticket is the bucket's credit at which the claim is ready; fixes
	// is the bucket's count of corrections when it was taken: without a
	// correction since, ReadyAt stands.
	ticket float64
	fixes  uint64
}

// ReadyAt returns when c is ready now that later corrections are known: a
// level lowered from a server's header, or a lowered rate, moves the ready
// times of reservations already handed out later; a level raised from a
// server's header, or a raised rate, moves them earlier, never before the
// raise.
func (b *Bucket) ReadyAt(c Claim) time.Time {
	if c.bucket != b {
		return c.ReadyAt
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.readyLocked(c)
}

func (b *Bucket) readyLocked(c Claim) time.Time {
	if c.fixes == b.fixes {
		return c.ReadyAt
	}
	ticket := c.ticket
	if c.fixes < b.floorFixes {
		ticket = max(ticket, b.floor)
	}
	if short := ticket - b.credit; short > 0 {
		return b.abs(b.timeFor(b.cum(b.last) + short))
	}
	// Covered by the last refill or raise.
	if at := b.abs(b.last); at.Before(c.ReadyAt) {
		return at
	}
	return c.ReadyAt
}

// Name returns the bucket's configured name.
func (b *Bucket) Name() string { return b.name }

// ReserveAt takes n tokens at now and returns when they are covered. It fails
// with [ErrTooLarge] when n exceeds the capacity.
func (b *Bucket) ReserveAt(now time.Time, n float64) (Claim, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ready, imm, err := b.peekLocked(now, n)
	if err != nil {
		return Claim{}, err
	}
	return b.commitLocked(n, ready, b.readyTime(ready, imm, now)), nil
}

// CancelAt gives back the tokens of c, except those that reservations made
// after c already count on (so FIFO order is kept).
func (b *Bucket) CancelAt(now time.Time, c Claim) {
	if c.bucket != b || c.Tokens <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cancelLocked(now, c)
}

// SettleAt corrects a finished reservation of c.Tokens to actual tokens: the
// difference is given back or taken. Taking more may drive the level
// negative, so later reservations wait until it recovers.
func (b *Bucket) SettleAt(now time.Time, c Claim, actual float64) {
	if c.bucket != b {
		return
	}
	b.AdjustAt(now, c.Tokens-actual)
}

// AdjustAt adds delta tokens (negative: takes them), up to the capacity.
func (b *Bucket) AdjustAt(now time.Time, delta float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(b.rel(now))
	b.level = min(b.capacity, b.level+delta)
}

// LevelAt returns the level at now; negative while in debt.
func (b *Bucket) LevelAt(now time.Time) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(b.rel(now))
	return b.level
}

// SetLevelAt sets the level at now (clamped to the capacity), e.g. from a
// server's x-ratelimit-remaining header.
func (b *Bucket) SetLevelAt(now time.Time, level float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.rel(now)
	b.advance(s)
	b.lowerTo(s, min(b.capacity, level))
}

// LowerAt lowers the level to at most level; it never raises it.
func (b *Bucket) LowerAt(now time.Time, level float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.rel(now)
	b.advance(s)
	b.lowerTo(s, min(b.level, level))
}

// lowerTo sets the level at s; when that lowers it, the reservations handed
// out wait for the missing tokens too.
func (b *Bucket) lowerTo(s, level float64) {
	// Queued reservations wait only for the part of the cut that takes the
	// level below zero: above it, they still have their tokens.
	if short := min(b.level-level, -level); short > 0 {
		b.floor = max(b.floor, b.credit)
		b.credit -= short
		b.fixes++
		b.floorFixes = b.fixes
	}
	b.level = level
}

// SetLimitAt changes the refill to limit tokens per period from now on. Any
// warm-up in progress continues towards the new rate. The reservations
// queued behind the debt wait for the rest of it at the new rate: a lower
// one moves their ready times later, a higher one earlier.
func (b *Bucket) SetLimitAt(now time.Time, limit float64) error {
	if !(limit > 0) || math.IsInf(limit, 0) {
		return fmt.Errorf("%w: bucket %q limit must be > 0, got %v", ErrInvalidConfig, b.name, limit)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.rel(now)
	b.advance(s)
	old := b.rate
	b.rate = limit / b.per.Seconds()
	if b.rate != old {
		b.fixes++
	}
	return nil
}

// SetCapacityAt changes the capacity from now on; a level above it is cut.
func (b *Bucket) SetCapacityAt(now time.Time, capacity float64) error {
	if !(capacity > 0) || math.IsInf(capacity, 0) {
		return fmt.Errorf("%w: bucket %q capacity must be > 0, got %v", ErrInvalidConfig, b.name, capacity)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(b.rel(now))
	b.setCapacity(capacity, capacity)
	return nil
}

// setCapacity sets the capacity and the largest reservation (maxN >=
// capacity); a level above the capacity is cut. The caller has advanced the
// bucket.
func (b *Bucket) setCapacity(capacity, maxN float64) {
	b.capacity, b.maxN = capacity, max(maxN, capacity)
	b.level = min(b.level, capacity)
}

// Limit returns the refill per period at the end of warm-up.
func (b *Bucket) Limit() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rate * b.per.Seconds()
}

// Capacity returns the capacity.
func (b *Bucket) Capacity() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.capacity
}

// Wait reserves n tokens and waits on clock until they are covered. When the
// wait would pass ctx's deadline it fails at once with a [*WaitError] carrying
// the predicted wait, and reserves nothing. When ctx ends while waiting, the
// tokens are given back.
func (b *Bucket) Wait(ctx context.Context, clock clockwork.Clock, n float64) error {
	now := clock.Now()
	b.mu.Lock()
	ready, imm, err := b.peekLocked(now, n)
	if err != nil {
		b.mu.Unlock()
		return err
	}
	readyAt := b.readyTime(ready, imm, now)
	if dl, ok := ctx.Deadline(); ok && readyAt.After(dl) {
		b.mu.Unlock()
		return &WaitError{Wait: readyAt.Sub(now), Deadline: dl}
	}
	c := b.commitLocked(n, ready, readyAt)
	b.mu.Unlock()
	if err := sleepUntil(ctx, clock, readyAt, nil); err != nil {
		b.CancelAt(clock.Now(), c)
		return err
	}
	return nil
}

// rel converts an instant to seconds since the origin.
func (b *Bucket) rel(t time.Time) float64 { return t.Sub(b.origin).Seconds() }

// abs converts seconds since the origin to an instant, rounded up to the
// nanosecond so a ready time is never early.
func (b *Bucket) abs(s float64) time.Time {
	return b.origin.Add(time.Duration(math.Ceil(s * 1e9)))
}

// cum is the cumulative number of tokens generated s seconds after the origin.
func (b *Bucket) cum(s float64) float64 {
	if s <= 0 {
		return 0
	}
	r, w := b.rate, b.warm
	if w <= 0 {
		return r * s
	}
	if s <= w {
		return r / (2 * w) * s * s
	}
	return r*w/2 + r*(s-w)
}

// timeFor is the inverse of cum.
func (b *Bucket) timeFor(total float64) float64 {
	if total <= 0 {
		return 0
	}
	r, w := b.rate, b.warm
	if w <= 0 {
		return total / r
	}
	if warmTotal := r * w / 2; total > warmTotal {
		return (total-warmTotal)/r + w
	}
	return math.Sqrt(2 * w * total / r)
}

// advance refills up to s (seconds since the origin).
func (b *Bucket) advance(s float64) {
	if s <= b.last {
		return
	}
	refill := b.cum(s) - b.cum(b.last)
	b.level = min(b.capacity, b.level+refill)
	b.credit += refill
	b.last = s
	b.rebase()
}

// rebase moves the origin forward once warm-up is over, keeping the float
// seconds small so precision does not decay in long-running processes.
const rebaseAfter = 3600.0

func (b *Bucket) rebase() {
	if b.last < rebaseAfter || b.last < b.warm {
		return
	}
	shift := time.Duration(b.last * 1e9)
	b.origin = b.origin.Add(shift)
	s := shift.Seconds()
	b.warm = 0
	b.last -= s
	b.lastEvent -= s
}

// peekLocked refills to now and returns when n tokens would be covered;
// immediate reports that this is now.
func (b *Bucket) peekLocked(now time.Time, n float64) (ready float64, immediate bool, err error) {
	return b.peekRel(b.rel(now), n)
}

// peekRel is peekLocked at s = b.rel(now), for callers that convert the
// time once for several buckets with the same origin.
func (b *Bucket) peekRel(s, n float64) (ready float64, immediate bool, err error) {
	if n > b.maxN {
		return 0, false, b.tooLarge(n)
	}
	need := b.need(n)
	b.advance(s)
	if b.level >= need && s >= b.last {
		return s, true, nil
	}
	s = max(s, b.last)
	if b.level >= need {
		return s, false, nil
	}
	return max(s, b.timeFor(b.cum(s)+need-b.level)), false, nil
}

// need is the level a reservation of n waits for: n, or, above the
// capacity, a full bucket (unless whole).
func (b *Bucket) need(n float64) float64 {
	if n > b.capacity && !b.whole {
		return b.capacity // goes when the bucket is full
	}
	return n
}

func (b *Bucket) tooLarge(n float64) error {
	return fmt.Errorf("%w: %v tokens, bucket %q holds %v", ErrTooLarge, n, b.name, b.maxN)
}

func (b *Bucket) commitLocked(n, ready float64, readyAt time.Time) Claim {
	return Claim{bucket: b, Tokens: n, ReadyAt: readyAt, ticket: b.take(n, ready), fixes: b.fixes}
}

// take takes n tokens whose ready time peekRel gave and returns their
// ticket: the credit at which the level covers them (for a reservation
// above the capacity, a full bucket).
func (b *Bucket) take(n, ready float64) float64 {
	ticket := b.credit + b.need(n) - b.level
	b.level -= n
	b.lastEvent = max(b.lastEvent, ready)
	return ticket
}

// readyTime is the instant of a ready time from peekLocked.
func (b *Bucket) readyTime(s float64, immediate bool, now time.Time) time.Time {
	if immediate {
		return now
	}
	return b.abs(s)
}

func (b *Bucket) cancelLocked(now time.Time, c Claim) {
	s := b.rel(now)
	b.advance(s)
	restore := c.Tokens
	from := max(s, b.rel(c.ReadyAt))
	if b.lastEvent > from {
		restore -= b.cum(b.lastEvent) - b.cum(from)
	}
	if restore > 0 {
		b.level = min(b.capacity, b.level+restore)
	}
}

// raiseTo raises the level at s (the caller has advanced the bucket) to
// level, at most the capacity. The reservations queued behind the debt are
// ready earlier by the time the refill takes to bring the difference, never
// before s. Only after the warm-up, where the refill is linear.
func (b *Bucket) raiseTo(s, level float64) {
	level = min(level, b.capacity)
	if level <= b.level {
		return
	}
	// Only a level below zero has reservations waiting on it.
	if b.level < 0 {
		b.credit += level - b.level
		b.fixes++
	}
	b.level = level
}

// calibrateAt moves the level at now into [lo, hi], the band a server's
// header allows: above hi it is lowered to hi; below lo it is raised to lo
// when raise is set (never during the warm-up). It reports a raise.
func (b *Bucket) calibrateAt(now time.Time, lo, hi float64, raise bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.rel(now)
	b.advance(s)
	switch {
	case b.level > hi:
		b.lowerTo(s, hi)
	case raise && b.level < lo && s >= b.warm:
		b.raiseTo(s, lo)
		return true
	}
	return false
}

// warmingAt reports whether the warm-up is still running at now.
func (b *Bucket) warmingAt(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rel(now) < b.warm
}

// endWarmUpAt ends a warm-up in progress: the refill runs at the full rate
// from now on (reservations already queued keep their later ready times).
func (b *Bucket) endWarmUpAt(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(b.rel(now))
	b.warm = 0
}
