package shaping

import (
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
