package shaping

import "time"

// Sample is one finished request, as fed to a [Controller].
type Sample struct {
	// At is when the request finished.
	At time.Time
	// Latency is the request's duration, send to last byte.
	Latency time.Duration
	// Tokens is the total tokens the request processed (prompt plus
	// completion); 0 when unknown.
	Tokens int
	// OutputTokens is the tokens generated; time per output token is the
	// congestion signal, as generation time grows with output length.
	OutputTokens int
	// InFlight is how many requests were in flight when it was sent,
	// itself included.
	InFlight int
	// Dropped is true for a rate-limit or overload answer (429, 503).
	Dropped bool
}

// Controller computes a concurrency limit from feedback (the algorithm, kept
// apart from its enforcement by [ConcurrencyLimiter], as in
// Netflix/concurrency-limits). Implementations are not safe for concurrent
// use; a [Lane] serialises the calls.
type Controller interface {
	// Update feeds a finished request and returns the new limit.
	Update(s Sample) int
	// Tick lets time-driven rules run (idle restart, end of a drain) and
	// returns the limit. It is called on every admission.
	Tick(now time.Time) int
	// Limit returns the current limit.
	Limit() int
}

// Guided is implemented by controllers that accept known quotas as a ceiling.
type Guided interface {
	// SetGuide sets the known requests and tokens per minute (0: unknown).
	SetGuide(rpm, tpm float64)
}

// Stateful is implemented by controllers that report a named state.
type Stateful interface {
	State() string
}
