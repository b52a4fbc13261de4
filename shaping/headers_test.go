package shaping

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseHeaders(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Set("x-ratelimit-limit-requests", "60")
	h.Set("x-ratelimit-remaining-tokens", "149984")
	h.Set("x-ratelimit-reset-tokens", "6m0s")
	h.Set("retry-after", "20")
	r := ParseHeaders(h, t0)
	require.Equal(t, RateLimitHeaders{
		LimitRequests: 60, HasLimitRequests: true,
		RemainingTokens: 149984, HasRemainingTokens: true,
		ResetTokens: 6 * time.Minute, RetryAfter: 20 * time.Second, HasRetryAfter: true,
	}, r)
	h.Set("retry-after-ms", "1500")
	require.Equal(t, 1500*time.Millisecond, ParseHeaders(h, t0).RetryAfter)
}

func TestParseHeadersCases(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		h    map[string]string
		want RateLimitHeaders
	}{
		{"none", nil, RateLimitHeaders{}},
		{"every limit and remaining, spaces trimmed",
			map[string]string{"x-ratelimit-limit-requests": " 60 ", "x-ratelimit-limit-tokens": "1000", "x-ratelimit-remaining-requests": "0", "x-ratelimit-remaining-tokens": "12.5"},
			RateLimitHeaders{LimitRequests: 60, HasLimitRequests: true, LimitTokens: 1000, HasLimitTokens: true,
				RemainingRequests: 0, HasRemainingRequests: true, RemainingTokens: 12.5, HasRemainingTokens: true}},
		{"malformed and negative values are absent",
			map[string]string{"x-ratelimit-limit-requests": "many", "x-ratelimit-remaining-tokens": "-1", "x-ratelimit-reset-requests": "-1s", "x-ratelimit-reset-tokens": "-2", "retry-after": "soon"},
			RateLimitHeaders{}},
		{"resets as Go durations or seconds",
			map[string]string{"x-ratelimit-reset-requests": "1.5", "x-ratelimit-reset-tokens": "12ms"},
			RateLimitHeaders{ResetRequests: 1500 * time.Millisecond, ResetTokens: 12 * time.Millisecond}},
		{"zero reset and retry-after",
			map[string]string{"x-ratelimit-reset-requests": "0", "retry-after": "0"},
			RateLimitHeaders{HasRetryAfter: true}},
		{"retry-after in seconds", map[string]string{"retry-after": "1.5"}, RateLimitHeaders{RetryAfter: 1500 * time.Millisecond, HasRetryAfter: true}},
		{"retry-after as an HTTP date", map[string]string{"retry-after": "Thu, 01 Jan 2026 00:00:30 GMT"}, RateLimitHeaders{RetryAfter: 30 * time.Second, HasRetryAfter: true}},
		{"an HTTP date in the past is now", map[string]string{"retry-after": "Wed, 31 Dec 2025 23:59:00 GMT"}, RateLimitHeaders{HasRetryAfter: true}},
		{"retry-after-ms wins", map[string]string{"retry-after-ms": "250", "retry-after": "20"}, RateLimitHeaders{RetryAfter: 250 * time.Millisecond, HasRetryAfter: true}},
		{"a bad retry-after-ms falls back", map[string]string{"retry-after-ms": "-5", "retry-after": "2"}, RateLimitHeaders{RetryAfter: 2 * time.Second, HasRetryAfter: true}},
		{"retry-after-ms zero", map[string]string{"retry-after-ms": "0", "retry-after": "2"}, RateLimitHeaders{HasRetryAfter: true}},
		{"retry-after-ms fractional, spaces trimmed", map[string]string{"retry-after-ms": " 1.5 "}, RateLimitHeaders{RetryAfter: 1500 * time.Microsecond, HasRetryAfter: true}},
		{"a huge retry-after saturates", map[string]string{"retry-after": "1e300"}, RateLimitHeaders{RetryAfter: math.MaxInt64, HasRetryAfter: true}},
		{"a huge retry-after-ms saturates", map[string]string{"retry-after-ms": "9223372036855"}, RateLimitHeaders{RetryAfter: math.MaxInt64, HasRetryAfter: true}},
		{"a day in milliseconds", map[string]string{"retry-after-ms": "86400000"}, RateLimitHeaders{RetryAfter: 24 * time.Hour, HasRetryAfter: true}},
		{"an infinite or NaN retry-after is absent", map[string]string{"retry-after-ms": "+Inf", "retry-after": "NaN"}, RateLimitHeaders{}},
		{"an out-of-range retry-after is absent", map[string]string{"retry-after": "1e400"}, RateLimitHeaders{}},
		{"an HTTP date far ahead saturates", map[string]string{"retry-after": "Fri, 31 Dec 9999 23:59:59 GMT"}, RateLimitHeaders{RetryAfter: math.MaxInt64, HasRetryAfter: true}},
		{"infinite and NaN counts are absent",
			map[string]string{"x-ratelimit-remaining-tokens": "Inf", "x-ratelimit-limit-tokens": "NaN", "x-ratelimit-remaining-requests": "-0"},
			RateLimitHeaders{HasRemainingRequests: true}},
		{"a huge reset in seconds saturates", map[string]string{"x-ratelimit-reset-tokens": "1e300"}, RateLimitHeaders{ResetTokens: math.MaxInt64}},
	} {
		h := http.Header{}
		for k, v := range tc.h {
			h.Set(k, v)
		}
		require.Equal(t, tc.want, ParseHeaders(h, t0), tc.name)
	}
	for _, h := range []RateLimitHeaders{
		{HasLimitRequests: true}, {HasLimitTokens: true}, {HasRemainingRequests: true}, {HasRemainingTokens: true}, {HasRetryAfter: true},
	} {
		require.True(t, h.Any(), "%+v", h)
	}
	require.False(t, RateLimitHeaders{}.Any())
	require.False(t, RateLimitHeaders{ResetTokens: time.Second, LimitTokens: 5}.Any(), "values without their Has flag are absent")
}
