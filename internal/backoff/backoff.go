// Package backoff is the one retry-wait policy of llmq: exponential growth
// from Base, doubling per retry up to Max, optionally with full jitter, and
// a server's Retry-After honoured as a floor. It is a small package of its
// own rather than github.com/cenkalti/backoff because the callers need a
// pure function of the retry number, full jitter drawn from an injected
// *rand.Rand (deterministic tests), and Retry-After clamped at a cap; that
// library keeps state per operation and draws ±factor jitter from the
// global source.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Policy computes the wait before a retry. The zero value waits nothing.
type Policy struct {
	// Base is the first wait (with Jitter, the first window's top).
	Base time.Duration
	// Max caps the exponential figure.
	Max time.Duration
	// Jitter draws the wait uniformly from [0, the exponential figure]
	// ("full jitter"), so that clients failing together retry apart.
	Jitter bool
	// MaxRetryAfter caps how long a server's Retry-After is honoured.
	MaxRetryAfter time.Duration
}

// Exp returns the exponential figure of retry number retry (0 for the
// first retry): min(Max, Base·2^retry), without overflow.
func (p Policy) Exp(retry int) time.Duration {
	d := p.Base
	for i := 0; i < retry && d < p.Max; i++ {
		if d > p.Max/2 {
			return p.Max
		}
		d *= 2
	}
	return min(d, p.Max)
}

// Delay returns the wait before retry number retry: Exp(retry), or with
// Jitter a uniform draw from [0, Exp(retry)] taken from rng (the global
// source when rng is nil), raised to retryAfter clamped at MaxRetryAfter.
func (p Policy) Delay(retry int, retryAfter time.Duration, rng *rand.Rand) time.Duration {
	d := p.Exp(retry)
	if p.Jitter && d > 0 {
		if rng != nil {
			d = time.Duration(rng.Int64N(int64(d) + 1))
		} else {
			d = time.Duration(rand.Int64N(int64(d) + 1))
		}
	}
	return max(d, min(retryAfter, p.MaxRetryAfter))
}
