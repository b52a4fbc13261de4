package shaping

import (
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
}

// ParseHeaders reads the x-ratelimit-* and Retry-After headers of h. now is
// used for an HTTP-date Retry-After. Malformed values are treated as absent.
func ParseHeaders(h http.Header, now time.Time) RateLimitHeaders {
	var r RateLimitHeaders
	r.LimitRequests, r.HasLimitRequests = headerFloat(h, "X-Ratelimit-Limit-Requests")
	r.LimitTokens, r.HasLimitTokens = headerFloat(h, "X-Ratelimit-Limit-Tokens")
	r.RemainingRequests, r.HasRemainingRequests = headerFloat(h, "X-Ratelimit-Remaining-Requests")
	r.RemainingTokens, r.HasRemainingTokens = headerFloat(h, "X-Ratelimit-Remaining-Tokens")
	r.ResetRequests, _ = headerDuration(h, "X-Ratelimit-Reset-Requests")
	r.ResetTokens, _ = headerDuration(h, "X-Ratelimit-Reset-Tokens")
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			r.RetryAfter, r.HasRetryAfter = time.Duration(ms*float64(time.Millisecond)), true
		}
	}
	if v := h.Get("Retry-After"); v != "" && !r.HasRetryAfter {
		if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
			r.RetryAfter, r.HasRetryAfter = time.Duration(s*float64(time.Second)), true
		} else if t, err := http.ParseTime(v); err == nil {
			r.RetryAfter, r.HasRetryAfter = max(0, t.Sub(now)), true
		}
	}
	return r
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
	if err != nil || f < 0 {
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
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second)), true
	}
	return 0, false
}
