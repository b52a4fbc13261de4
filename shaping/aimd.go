package shaping

import (
	"cmp"
	"fmt"
	"time"
)

// AIMD defaults.
const (
	AIMDInitialDefault = 4
	AIMDMaxDefault     = 256
	AIMDBackoffDefault = 0.7
)

// AIMDConfig configures [AIMD].
type AIMDConfig struct {
	// Initial is the starting limit. Default AIMDInitialDefault.
	Initial int
	// Min is the lowest limit. Default 1.
	Min int
	// Max is the highest limit. Default AIMDMaxDefault.
	Max int
	// Backoff multiplies the limit on a drop, in (0, 1). Default
	// AIMDBackoffDefault.
	Backoff float64
}

// WithDefaults returns c with the defaults applied.
func (c AIMDConfig) WithDefaults() AIMDConfig {
	c.Initial = cmp.Or(c.Initial, AIMDInitialDefault)
	c.Min = cmp.Or(c.Min, 1)
	c.Max = cmp.Or(c.Max, AIMDMaxDefault)
	c.Backoff = cmp.Or(c.Backoff, AIMDBackoffDefault)
	return c
}

func (c AIMDConfig) validate() error {
	switch {
	case c.Min < 1:
		return fmt.Errorf("%w: AIMDConfig.Min must be >= 1, got %d", ErrInvalidConfig, c.Min)
	case c.Max < c.Min:
		return fmt.Errorf("%w: AIMDConfig.Max %d below Min %d", ErrInvalidConfig, c.Max, c.Min)
	case c.Initial < c.Min || c.Initial > c.Max:
		return fmt.Errorf("%w: AIMDConfig.Initial %d outside [Min, Max]", ErrInvalidConfig, c.Initial)
	case !(c.Backoff > 0 && c.Backoff < 1):
		return fmt.Errorf("%w: AIMDConfig.Backoff must be in (0, 1), got %v", ErrInvalidConfig, c.Backoff)
	}
	return nil
}

// AIMD is additive-increase multiplicative-decrease: +1 per successful sample
// while the limit is at least half used, times Backoff on a drop (at most
// once per latency window, so one burst of 429s counts once).
type AIMD struct {
	cfg      AIMDConfig
	limit    float64
	lastDrop time.Time
}

// NewAIMD returns an AIMD controller.
func NewAIMD(cfg AIMDConfig) (*AIMD, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &AIMD{cfg: cfg, limit: float64(cfg.Initial)}, nil
}

// Update implements [Controller].
func (a *AIMD) Update(s Sample) int {
	switch {
	case s.Dropped:
		if a.lastDrop.IsZero() || s.At.Sub(a.lastDrop) >= s.Latency {
			a.limit = max(float64(a.cfg.Min), a.limit*a.cfg.Backoff)
			a.lastDrop = s.At
		}
	case float64(s.InFlight)*2 >= a.limit:
		a.limit = min(float64(a.cfg.Max), a.limit+1)
	}
	return a.Limit()
}

// Tick implements [Controller]; AIMD has no time-driven rule.
func (a *AIMD) Tick(time.Time) int { return a.Limit() }

// Limit implements [Controller].
func (a *AIMD) Limit() int { return int(a.limit) }
