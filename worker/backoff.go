package worker

import (
	"math/rand/v2"
	"time"

	"github.com/llmq/llmq/internal/backoff"
)

// Backoff computes retry delays: exponential backoff with full jitter
// (AWS architecture blog, "Exponential Backoff And Jitter"), never shorter
// than what the server asked for. It is a pure function of its inputs and
// the random source.
type Backoff struct {
	// Base is the cap of the first retry's jitter window. Default 500ms.
	Base time.Duration
	// Max caps the jitter window. Default 30s.
	Max time.Duration
	// MaxRetryAfter caps how long a server's Retry-After is honoured, in a
	// job's backoff and in its lane's pause after a 429; a longer (or
	// unparseable, or infinite) advice is clamped to it. Default 10m.
	MaxRetryAfter time.Duration
}

// Backoff defaults.
const (
	BackoffBaseDefault          = 500 * time.Millisecond
	BackoffMaxDefault           = 30 * time.Second
	BackoffMaxRetryAfterDefault = 10 * time.Minute
)

// WithDefaults fills zero fields with the defaults.
func (b Backoff) WithDefaults() Backoff {
	if b.Base <= 0 {
		b.Base = BackoffBaseDefault
	}
	if b.Max <= 0 {
		b.Max = BackoffMaxDefault
	}
	if b.MaxRetryAfter <= 0 {
		b.MaxRetryAfter = BackoffMaxRetryAfterDefault
	}
	return b
}

// Delay returns the wait before retry number retry (0 for the first retry):
// a uniform draw from [0, min(Max, Base·2^retry)], raised to retryAfter when
// the server asked for longer (the policy of internal/backoff).
func (b Backoff) Delay(retry int, retryAfter time.Duration, rng *rand.Rand) time.Duration {
	return backoff.Policy{Base: b.Base, Max: b.Max, Jitter: true, MaxRetryAfter: b.MaxRetryAfter}.Delay(retry, retryAfter, rng)
}

// RetryBudget bounds retries to a share of successful calls, so a failing
// upstream sees a trickle of retries instead of a multiplied load (the
// retry-throttling scheme of gRPC). A retry refused by the budget is not
// given up: the worker delays it by Backoff.Max instead, so no job is lost to
// the budget. It is not safe for concurrent use; the worker guards it.
type RetryBudget struct {
	// Ratio is how many retries each successful call earns. Default 0.5.
	Ratio float64
	// Min is the starting balance, in retries. Default 10.
	Min float64
	// Max caps the balance. Default 1000.
	Max float64

	balance float64
}

// RetryBudget defaults.
const (
	RetryBudgetRatioDefault = 0.5
	RetryBudgetMinDefault   = 10
	RetryBudgetMaxDefault   = 1000
)

// NewRetryBudget returns a budget with zero fields set to the defaults and a
// starting balance of Min.
func NewRetryBudget(ratio, minRetries, maxRetries float64) *RetryBudget {
	b := &RetryBudget{Ratio: ratio, Min: minRetries, Max: maxRetries}
	if b.Ratio <= 0 {
		b.Ratio = RetryBudgetRatioDefault
	}
	if b.Min <= 0 {
		b.Min = RetryBudgetMinDefault
	}
	if b.Max <= 0 {
		b.Max = RetryBudgetMaxDefault
	}
	b.balance = b.Min
	return b
}

// Deposit records a successful call.
func (b *RetryBudget) Deposit() { b.balance = min(b.balance+b.Ratio, b.Max) }

// Available reports whether the budget holds a retry.
func (b *RetryBudget) Available() bool { return b.balance >= 1 }

// Withdraw takes one retry from the budget and reports whether it was there.
func (b *RetryBudget) Withdraw() bool {
	if !b.Available() {
		return false
	}
	b.balance--
	return true
}

// Balance is the retries currently available.
func (b *RetryBudget) Balance() float64 { return b.balance }
