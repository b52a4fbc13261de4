package shaping

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RateLimitHeaders are the rate-limit facts a server sent with a response.
// A field whose header was absent is zero and its Has flag is false.
type RateLimitHeaders struct {
	LimitRequests, LimitTokens         float64
	RemainingRequests, RemainingTokens float64
	// ResetRequests and ResetTokens are the times until the server's
	// buckets are fully replenished.
	ResetRequests, ResetTokens time.Duration
	// RetryAfter is from retry-after-ms, else retry-after (seconds or an
	// HTTP date).
	RetryAfter time.Duration

	HasLimitRequests, HasLimitTokens         bool
	HasRemainingRequests, HasRemainingTokens bool
	HasRetryAfter                            bool
	// Concurrency says a 429 refused the request for the provider's calls
	// at a time, which no header states: its message said so
	// ([ConcurrencyMessage]); the caller sets it.
	Concurrency bool
}

// ParseHeaders reads the x-ratelimit-* and Retry-After headers of h. now is
// used for an HTTP-date Retry-After. Malformed values (negative, NaN,
// infinite, not a number) are treated as absent; durations too large for a
// time.Duration saturate at its maximum instead of overflowing, and the lane
// caps the pause it takes from them ([LaneConfig.MaxRetryAfter]).
func ParseHeaders(h http.Header, now time.Time) RateLimitHeaders {
	var r RateLimitHeaders
	r.LimitRequests, r.HasLimitRequests = headerFloat(h, "X-Ratelimit-Limit-Requests")
	r.LimitTokens, r.HasLimitTokens = headerFloat(h, "X-Ratelimit-Limit-Tokens")
	r.RemainingRequests, r.HasRemainingRequests = headerFloat(h, "X-Ratelimit-Remaining-Requests")
	r.RemainingTokens, r.HasRemainingTokens = headerFloat(h, "X-Ratelimit-Remaining-Tokens")
	r.ResetRequests, _ = headerDuration(h, "X-Ratelimit-Reset-Requests")
	r.ResetTokens, _ = headerDuration(h, "X-Ratelimit-Reset-Tokens")
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		r.RetryAfter, r.HasRetryAfter = parseDuration(v, time.Millisecond)
	}
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" && !r.HasRetryAfter {
		if r.RetryAfter, r.HasRetryAfter = parseDuration(v, time.Second); !r.HasRetryAfter {
			if t, err := http.ParseTime(v); err == nil {
				// Sub saturates; a date in the past means now.
				r.RetryAfter, r.HasRetryAfter = max(0, t.Sub(now)), true
			}
		}
	}
	return r
}

// parseDuration reads a non-negative, finite number of units (fractions
// allowed), saturating at the largest time.Duration.
func parseDuration(v string, unit time.Duration) (time.Duration, bool) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f >= 0) || math.IsInf(f, 1) {
		return 0, false
	}
	return saturate(f * float64(unit)), true
}

// saturate converts nanoseconds to a Duration, capped at the largest one (a
// float conversion out of range is not defined in Go).
func saturate(ns float64) time.Duration {
	if ns >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// Any reports whether any rate-limit header was present.
func (r RateLimitHeaders) Any() bool {
	return r.HasLimitRequests || r.HasLimitTokens || r.HasRemainingRequests ||
		r.HasRemainingTokens || r.HasRetryAfter
}

func headerFloat(h http.Header, key string) (float64, bool) {
	v := strings.TrimSpace(h.Get(key))
	if v == "" {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f >= 0) || math.IsInf(f, 1) {
		return 0, false
	}
	return f, true
}

// headerDuration reads a Go duration ("6m0s", "12ms") or plain seconds.
func headerDuration(h http.Header, key string) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get(key))
	if v == "" {
		return 0, false
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return d, true
	}
	return parseDuration(v, time.Second)
}
