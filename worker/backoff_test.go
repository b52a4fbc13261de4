package worker

import (
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
