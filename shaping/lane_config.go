package shaping

import (
	"cmp"
	"fmt"
	"math"
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
	// output: a configured cap, never the model's maximum
	// (docs/design/quotas.md).
	LaneMaxOutputDefault = 1024
	// LaneWarmUpDefault is the warm-up of shape and adaptive.
	LaneWarmUpDefault = 10 * time.Second
	// LanePauseDefault is how long a 429 without Retry-After pauses the lane.
	LanePauseDefault = time.Second
	// LaneShortBucketDefault is the longest bucket a provider that enforces
	// its limits over a few seconds is assumed to hold (the simulator's
	// short_bucket default; Azure checks windows of 1 or 10 s).
	LaneShortBucketDefault = 5 * time.Second
	// LaneSendSkewDefault is how much earlier than another a request may
	// be sent and still reach the provider after it (connection set-up,
	// scheduling, the provider tokenising a long prompt first).
	LaneSendSkewDefault = 100 * time.Millisecond
	// LaneMaxRetryAfterDefault caps a 429 pause: a Retry-After of hours (a
	// daily limit, a broken proxy) must not stop a lane for longer.
	LaneMaxRetryAfterDefault = 10 * time.Minute
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

// ColdStart is how a lane starts before it has heard from the provider.
type ColdStart string

const (
	// ColdStartProbe starts from what the provider says is available: the
	// buckets hold a probe (one request, or a second of a configured quota,
	// and ShortBucket of token refill, so the first request goes at once
	// whatever its size) and warm up from it, until the first answer with
	// rate-limit headers ends the warm-up and sets the levels. While the
	// provider's kind is unknown, the lane tries it with a staged burst
	// (lane_trial.go) and paces the rest; on a short bucket every send is
	// paced; once it is known to enforce per minute, only sends that leave
	// a bucket near empty are. Without headers the warm-up runs its course,
	// every send is paced and the burst stays at the probe's.
	ColdStartProbe ColdStart = "probe"
	// ColdStartStatic starts the buckets as LaneConfig.Start and WarmUp
	// say and paces every send; headers raise a level only once the
	// warm-up is over. For providers with burst protection (DashScope's
	// growth-rate limit), where a warm-up protects something.
	ColdStartStatic ColdStart = "static"
)

// Settlement says what happens to reserved tokens when the usage is known.
type Settlement int

const (
	// SettleActual corrects the reservation to the real usage (see
	// docs/design/quotas.md): unused max output is given back, an overrun
	// is taken.
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
	// Start is the buckets' initial level under ColdStartStatic. Default
	// StartDefault (empty with warm-up, full without).
	Start BucketStart
	// ColdStart is how the lane starts. Default: ColdStartProbe for shape
	// and adaptive when neither WarmUp nor Start is set, else
	// ColdStartStatic.
	ColdStart ColdStart
	// ShortBucket is the longest bucket a provider with short-period
	// enforcement is assumed to hold: the probe's token burst, and a
	// provider that admits more than twice it in refill enforces per
	// minute. Default LaneShortBucketDefault (5 s).
	ShortBucket time.Duration
	// SendSkew is how much earlier than a request another may be sent and
	// still reach the provider after it: a remaining header raises the
	// level only as far as it stays true when the requests sent within
	// SendSkew before its own were not seen yet. Default
	// LaneSendSkewDefault; -1 counts every earlier request as seen.
	SendSkew time.Duration
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
	// MaxRetryAfter caps how long a 429 pauses the lane, whatever its
	// Retry-After says. Default LaneMaxRetryAfterDefault (10 min).
	MaxRetryAfter time.Duration
	// Clock is the time source of Admit and Done. Default
	// clockwork.NewRealClock().
	Clock clockwork.Clock
	// Seed seeds the lane's one random choice: when, within ShortBucket,
	// the probe of a replica started with many others goes
	// ([Lane.SetPeersAt]). Default (0): a seed drawn at NewLane.
	Seed uint64
}

// WithDefaults returns c with the defaults applied.
func (c LaneConfig) WithDefaults() LaneConfig {
	c.Strategy = cmp.Or(c.Strategy, DefaultStrategy(c.RPM, c.TPM))
	c.Concurrency = cmp.Or(c.Concurrency, LaneConcurrencyDefault)
	c.MaxConcurrency = cmp.Or(c.MaxConcurrency, max(LaneMaxConcurrencyDefault, c.Concurrency))
	shaped := c.Strategy == StrategyShape || c.Strategy == StrategyAdaptive
	if c.ColdStart == "" {
		c.ColdStart = ColdStartStatic
		if shaped && c.WarmUp == 0 && c.Start == StartDefault {
			c.ColdStart = ColdStartProbe
		}
	}
	c.ShortBucket = cmp.Or(c.ShortBucket, LaneShortBucketDefault)
	c.SendSkew = cmp.Or(c.SendSkew, LaneSendSkewDefault)
	if c.MinInterval == 0 && shaped && c.RPM > 0 {
		c.MinInterval = time.Duration(float64(time.Minute) / c.RPM)
	}
	if c.WarmUp == 0 && shaped {
		c.WarmUp = LaneWarmUpDefault
	}
	c.DefaultMaxOutput = cmp.Or(c.DefaultMaxOutput, LaneMaxOutputDefault)
	c.PauseDefault = cmp.Or(c.PauseDefault, LanePauseDefault)
	c.MaxRetryAfter = cmp.Or(c.MaxRetryAfter, LaneMaxRetryAfterDefault)
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
	case c.ColdStart != ColdStartProbe && c.ColdStart != ColdStartStatic:
		return fmt.Errorf("%w: LaneConfig.ColdStart must be probe or static, got %q", ErrInvalidConfig, c.ColdStart)
	case c.ShortBucket < 0:
		return fmt.Errorf("%w: LaneConfig.ShortBucket must be >= 0, got %v", ErrInvalidConfig, c.ShortBucket)
	case c.MaxRetryAfter < 0:
		return fmt.Errorf("%w: LaneConfig.MaxRetryAfter must be >= 0, got %v", ErrInvalidConfig, c.MaxRetryAfter)
	}
	for i, q := range c.Quotas {
		if q.Bucket == nil {
			return fmt.Errorf("%w: LaneConfig.Quotas[%d].Bucket is nil", ErrInvalidConfig, i)
		}
	}
	return nil
}
