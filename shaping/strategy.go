package shaping

import "fmt"

// Strategy names one of the four client strategies of
// docs/design/rate-limiting.md.
type Strategy string

const (
	// StrategyRetry has no admission control: every request goes at once
	// and the caller only backs off after 429s.
	StrategyRetry Strategy = "retry"
	// StrategyRPM is an RPM bucket (with debt, FIFO) then a fixed
	// concurrency slot.
	StrategyRPM Strategy = "rpm"
	// StrategyShape is RPM and TPM buckets (prompt + max output reserved,
	// settled after), a concurrency slot, pacing inside the slot, and
	// warm-up.
	StrategyShape Strategy = "shape"
	// StrategyAdaptive is shape with an adaptive concurrency limit and
	// quotas learned from the server's headers.
	StrategyAdaptive Strategy = "adaptive"
)

// Strategies lists the strategies from the least to the most control, as
// docs/design/rate-limiting.md compares them.
var Strategies = []Strategy{StrategyRetry, StrategyRPM, StrategyShape, StrategyAdaptive}

// ParseStrategy returns the named strategy; "" is returned as "".
func ParseStrategy(s string) (Strategy, error) {
	switch st := Strategy(s); st {
	case "", StrategyRetry, StrategyRPM, StrategyShape, StrategyAdaptive:
		return st, nil
	}
	return "", fmt.Errorf("%w %q (want retry, rpm, shape or adaptive)", ErrUnknownStrategy, s)
}

// DefaultStrategy is shape when a quota is known and adaptive when not.
func DefaultStrategy(rpm, tpm float64) Strategy {
	if rpm > 0 || tpm > 0 {
		return StrategyShape
	}
	return StrategyAdaptive
}

// StrategyFor is the strategy a lane with quotas rpm and tpm runs when s is
// configured: s, unless it needs a quota the lane lacks (rpm without RPM,
// shape without either), then the default, adaptive, which learns them
// from the provider's headers; "" is the default.
func StrategyFor(s Strategy, rpm, tpm float64) Strategy {
	switch {
	case s == "",
		s == StrategyRPM && rpm <= 0,
		s == StrategyShape && rpm <= 0 && tpm <= 0:
		return DefaultStrategy(rpm, tpm)
	}
	return s
}
