package worker

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBackoffDelay(t *testing.T) {
	t.Parallel()
	b := Backoff{Base: 100 * time.Millisecond, Max: time.Second}.WithDefaults()
	for retry, window := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		window *= time.Millisecond
		for i := 0; i < 200; i++ {
			d := b.Delay(retry, 0, nil)
			require.GreaterOrEqual(t, d, time.Duration(0))
			require.LessOrEqual(t, d, window, "retry %d", retry)
		}
	}
	// The server's advice is a floor, clamped at MaxRetryAfter.
	require.GreaterOrEqual(t, b.Delay(0, 5*time.Second, nil), 5*time.Second)
	require.Equal(t, BackoffMaxRetryAfterDefault, b.Delay(0, time.Hour, nil))
}

func TestRetryBudget(t *testing.T) {
	t.Parallel()
	b := NewRetryBudget(0.5, 2, 3)
	require.True(t, b.Withdraw())
	require.True(t, b.Withdraw())
	require.False(t, b.Withdraw())
	b.Deposit()
	require.False(t, b.Withdraw(), "half a retry is not a retry")
	b.Deposit()
	require.True(t, b.Withdraw())
	for i := 0; i < 100; i++ {
		b.Deposit()
	}
	require.Equal(t, 3.0, b.Balance())
}

func TestBackoffWithDefaults(t *testing.T) {
	t.Parallel()
	defaults := Backoff{Base: BackoffBaseDefault, Max: BackoffMaxDefault, MaxRetryAfter: BackoffMaxRetryAfterDefault}
	require.Equal(t, defaults, Backoff{}.WithDefaults(), "zero: the defaults")
	require.Equal(t, defaults, Backoff{Base: -1, Max: -1, MaxRetryAfter: -1}.WithDefaults(), "negative: the defaults")
	set := Backoff{Base: 1, Max: 2, MaxRetryAfter: 3}
	require.Equal(t, set, set.WithDefaults(), "the smallest values set are kept")
}

// TestBackoffDelayExact: the top of the window (a source whose every draw
// is the largest), and the server's advice as a floor.
func TestBackoffDelayExact(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	b := Backoff{Base: 300 * ms, Max: time.Second, MaxRetryAfter: 2 * time.Second}
	top := rand.New(topOfWindow{})
	tests := []struct {
		name       string
		retry      int
		retryAfter time.Duration
		want       time.Duration
	}{
		{"first retry, top: Base", 0, 0, 300 * ms},
		{"second retry, top: 2·Base", 1, 0, 600 * ms},
		{"third retry, top: 4·Base capped at Max", 2, 0, time.Second},
		{"far retry, top: Max", 40, 0, time.Second},
		{"a shorter Retry-After than the draw: the draw", 0, 200 * ms, 300 * ms},
		{"a longer Retry-After than the draw: the Retry-After", 0, 400 * ms, 400 * ms},
		{"Retry-After of exactly MaxRetryAfter", 0, 2 * time.Second, 2 * time.Second},
		{"Retry-After past MaxRetryAfter: clamped", 0, time.Hour, 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, b.Delay(tt.retry, tt.retryAfter, top))
		})
	}
	// A zero window draws nothing, from the given source or the global one.
	require.Equal(t, 5*ms, Backoff{MaxRetryAfter: time.Second}.Delay(3, 5*ms, top))
	require.Equal(t, time.Duration(0), Backoff{}.Delay(0, 0, nil))
}

func TestNewRetryBudgetDefaults(t *testing.T) {
	t.Parallel()
	defaults := &RetryBudget{Ratio: RetryBudgetRatioDefault, Min: RetryBudgetMinDefault, Max: RetryBudgetMaxDefault, balance: RetryBudgetMinDefault}
	require.Equal(t, defaults, NewRetryBudget(0, 0, 0), "zero: the defaults")
	require.Equal(t, defaults, NewRetryBudget(-1, -1, -1), "negative: the defaults")
	require.Equal(t, &RetryBudget{Ratio: 0.25, Min: 1, Max: 2, balance: 1}, NewRetryBudget(0.25, 1, 2))
}

// TestBackoffDelayGlobalRand: without a source the draw comes from the
// global one, over the whole window (a window of 1ns has two values).
func TestBackoffDelayGlobalRand(t *testing.T) {
	t.Parallel()
	b := Backoff{Base: time.Nanosecond, Max: time.Nanosecond, MaxRetryAfter: time.Second}
	seen := map[time.Duration]bool{}
	for range 200 {
		seen[b.Delay(0, 0, nil)] = true
	}
	require.Equal(t, map[time.Duration]bool{0: true, 1: true}, seen)
}
