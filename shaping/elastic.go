package shaping

import (
	"cmp"
	"fmt"
	"time"
)

// Elastic defaults.
const (
	ElasticInitialDefault    = 4
	ElasticMaxDefault        = 512
	ElasticGainDefault       = 1.0
	ElasticMinStepDefault    = 1.0
	ElasticMaxGrowthDefault  = 0.5
	ElasticBackoffDefault    = 0.7
	ElasticHoldFactorDefault = 2.0
	ElasticAlphaDefault      = 0.2
	ElasticHeadroomDefault   = 1.2
	ElasticIdleAfterDefault  = 30 * time.Second
	ElasticDrainMinDefault   = time.Second
)

// Elastic controller states.
const (
	StateProbing = "probing"
	StateHold    = "hold"
	StateDrain   = "drain"
)

// ElasticConfig configures [Elastic]. Every zero field takes its default.
type ElasticConfig struct {
	// Initial is the starting limit and the floor of a slow-start restart.
	// Default ElasticInitialDefault.
	Initial int
	// Min is the lowest limit. Default 1.
	Min int
	// Max is the highest limit. Default ElasticMaxDefault.
	Max int
	// Gain scales the spring: growth per round is limit*tension*Gain, where
	// tension = 1 - limit/best (1 while no best level is known). Default
	// ElasticGainDefault.
	Gain float64
	// MinStep is the linear thrust per round, so probing continues when
	// the spring is slack. Default ElasticMinStepDefault.
	MinStep float64
	// MaxGrowth is the governor: growth per round is at most this fraction
	// of the limit (and at least MinStep). Default ElasticMaxGrowthDefault.
	MaxGrowth float64
	// Backoff multiplies the limit on a drop (DRAIN). Default
	// ElasticBackoffDefault.
	Backoff float64
	// HoldFactor: a time-per-token above HoldFactor times its EMA means
	// saturation, and the limit is held. Default ElasticHoldFactorDefault.
	HoldFactor float64
	// Alpha is the EMA smoothing factor. Default ElasticAlphaDefault.
	Alpha float64
	// Headroom is the Little's-law buffer: the limit only grows while the
	// in-flight count times Headroom reaches it, and known quotas cap it at
	// Headroom x rate x latency. Default ElasticHeadroomDefault.
	Headroom float64
	// IdleAfter triggers a slow-start restart (limit halved, not below
	// Initial) after this long without activity. Default
	// ElasticIdleAfterDefault; -1 disables.
	IdleAfter time.Duration
	// DrainMin is the shortest DRAIN; a drain lasts max(DrainMin, latency
	// EMA). Default ElasticDrainMinDefault.
	DrainMin time.Duration
}

// WithDefaults returns c with the defaults applied.
func (c ElasticConfig) WithDefaults() ElasticConfig {
	c.Initial = cmp.Or(c.Initial, ElasticInitialDefault)
	c.Min = cmp.Or(c.Min, 1)
	c.Max = cmp.Or(c.Max, ElasticMaxDefault)
	c.Gain = cmp.Or(c.Gain, ElasticGainDefault)
	c.MinStep = cmp.Or(c.MinStep, ElasticMinStepDefault)
	c.MaxGrowth = cmp.Or(c.MaxGrowth, ElasticMaxGrowthDefault)
	c.Backoff = cmp.Or(c.Backoff, ElasticBackoffDefault)
	c.HoldFactor = cmp.Or(c.HoldFactor, ElasticHoldFactorDefault)
	c.Alpha = cmp.Or(c.Alpha, ElasticAlphaDefault)
	c.Headroom = cmp.Or(c.Headroom, ElasticHeadroomDefault)
	c.IdleAfter = cmp.Or(c.IdleAfter, ElasticIdleAfterDefault)
	c.DrainMin = cmp.Or(c.DrainMin, ElasticDrainMinDefault)
	return c
}

func (c ElasticConfig) validate() error {
	switch {
	case c.Min < 1:
		return fmt.Errorf("%w: ElasticConfig.Min must be >= 1, got %d", ErrInvalidConfig, c.Min)
	case c.Max < c.Min:
		return fmt.Errorf("%w: ElasticConfig.Max %d below Min %d", ErrInvalidConfig, c.Max, c.Min)
	case c.Initial < c.Min || c.Initial > c.Max:
		return fmt.Errorf("%w: ElasticConfig.Initial %d outside [Min, Max]", ErrInvalidConfig, c.Initial)
	case !(c.Backoff > 0 && c.Backoff < 1):
		return fmt.Errorf("%w: ElasticConfig.Backoff must be in (0, 1), got %v", ErrInvalidConfig, c.Backoff)
	case !(c.Alpha > 0 && c.Alpha <= 1):
		return fmt.Errorf("%w: ElasticConfig.Alpha must be in (0, 1], got %v", ErrInvalidConfig, c.Alpha)
	case c.Gain < 0 || c.MinStep <= 0 || c.MaxGrowth <= 0:
		return fmt.Errorf("%w: ElasticConfig.Gain, MinStep, MaxGrowth must be positive", ErrInvalidConfig)
	case c.HoldFactor <= 1 || c.Headroom < 1:
		return fmt.Errorf("%w: ElasticConfig.HoldFactor must be > 1 and Headroom >= 1", ErrInvalidConfig)
	case c.IdleAfter < -1:
		return fmt.Errorf("%w: ElasticConfig.IdleAfter must be >= -1, got %v", ErrInvalidConfig, c.IdleAfter)
	}
	return nil
}

// Elastic is the BBR-like controller ("elastic bandwidth probing") of
// docs/design/rate-limiting.md: each success grows the limit by a share of
// a per-round step, growth holds while the limit is unused or time-per-token
// rises, and a 429 starts a multiplicative DRAIN. The step's terms:
// docs/design/rate-limiting.md#elastic.
type Elastic struct {
	cfg        ElasticConfig
	limit      float64
	best       float64 // level of the last drop; 0 until one happens
	state      string
	emaLatency float64 // seconds
	emaTokens  float64
	emaTPT     float64 // seconds per token
	drainUntil time.Time
	lastSeen   time.Time
	rpm, tpm   float64
}

// NewElastic returns an Elastic controller.
func NewElastic(cfg ElasticConfig) (*Elastic, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Elastic{cfg: cfg, limit: float64(cfg.Initial), state: StateProbing}, nil
}

// SetGuide implements [Guided].
func (e *Elastic) SetGuide(rpm, tpm float64) { e.rpm, e.tpm = rpm, tpm }

// State implements [Stateful].
func (e *Elastic) State() string { return e.state }

// Limit implements [Controller].
func (e *Elastic) Limit() int { return max(e.cfg.Min, int(e.limit)) }

// Tick implements [Controller]: it ends a drain and applies the slow-start
// restart.
func (e *Elastic) Tick(now time.Time) int {
	if e.state == StateDrain && !now.Before(e.drainUntil) {
		e.state = StateProbing
	}
	if e.cfg.IdleAfter > 0 && !e.lastSeen.IsZero() && now.Sub(e.lastSeen) > e.cfg.IdleAfter {
		e.limit = max(float64(e.cfg.Initial), e.limit/2)
	}
	if e.lastSeen.Before(now) {
		e.lastSeen = now
	}
	return e.Limit()
}

// Update implements [Controller].
func (e *Elastic) Update(s Sample) int {
	if e.lastSeen.Before(s.At) {
		e.lastSeen = s.At
	}
	if s.Dropped {
		if e.state != StateDrain || !s.At.Before(e.drainUntil) {
			e.best = e.limit
			e.limit = max(float64(e.cfg.Min), e.limit*e.cfg.Backoff)
			e.state = StateDrain
			e.drainUntil = s.At.Add(max(e.cfg.DrainMin, time.Duration(e.emaLatency*float64(time.Second))))
		}
		return e.Limit()
	}
	saturated := e.observe(s)
	switch {
	case e.state == StateDrain && s.At.Before(e.drainUntil):
		return e.Limit()
	case saturated:
		e.state = StateHold
		return e.Limit()
	}
	e.state = StateProbing
	if float64(s.InFlight)*e.cfg.Headroom < float64(e.Limit()) {
		return e.Limit() // not using the limit: no evidence to grow on
	}
	// The ceiling stops growth; it does not cut the limit, since its EMAs
	// swing with the long/short mix.
	e.limit = max(e.limit, min(e.limit+e.step()/e.limit, float64(e.cfg.Max), e.ceiling()))
	return e.Limit()
}

// observe updates the EMAs and reports whether time-per-token jumped.
func (e *Elastic) observe(s Sample) bool {
	lat := s.Latency.Seconds()
	a := e.cfg.Alpha
	if e.emaLatency == 0 {
		e.emaLatency = lat
	} else {
		e.emaLatency = (1-a)*e.emaLatency + a*lat
	}
	if s.Tokens > 0 {
		if e.emaTokens == 0 {
			e.emaTokens = float64(s.Tokens)
		}
		e.emaTokens = (1-a)*e.emaTokens + a*float64(s.Tokens)
	}
	if s.OutputTokens <= 0 {
		return false
	}
	tpt := lat / float64(s.OutputTokens)
	if e.emaTPT == 0 {
		e.emaTPT = tpt
		return false
	}
	saturated := tpt > e.cfg.HoldFactor*e.emaTPT
	e.emaTPT = (1-a)*e.emaTPT + a*tpt
	return saturated
}

// step is the growth per round: max(spring, linear), capped by the governor.
func (e *Elastic) step() float64 {
	tension := 1.0
	if e.best > 0 {
		tension = max(0, 1-e.limit/e.best)
	}
	spring := e.limit * tension * e.cfg.Gain
	return min(max(spring, e.cfg.MinStep), max(e.cfg.MinStep, e.limit*e.cfg.MaxGrowth))
}

// ceiling is the concurrency that sustains the known quotas (Little's law).
func (e *Elastic) ceiling() float64 {
	c := float64(e.cfg.Max)
	if e.emaLatency <= 0 {
		return c
	}
	if e.rpm > 0 {
		c = min(c, e.cfg.Headroom*e.rpm/60*e.emaLatency)
	}
	if e.tpm > 0 && e.emaTokens > 0 {
		c = min(c, e.cfg.Headroom*e.tpm/60/e.emaTokens*e.emaLatency)
	}
	return max(c, float64(e.cfg.Min))
}
