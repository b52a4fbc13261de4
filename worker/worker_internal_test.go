package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDrainEstimate(t *testing.T) {
	t.Parallel()
	require.Equal(t, time.Duration(0), drainEstimate(0, 0))
	require.Equal(t, DrainUnknown, drainEstimate(10, 0))
	require.Equal(t, 100*time.Second, drainEstimate(1000, 10), "10 jobs/s")
	require.Equal(t, DrainUnknown, drainEstimate(1<<40, 1), "capped")
}

func TestRetryDelay(t *testing.T) {
	t.Parallel()
	require.Equal(t, 100*time.Millisecond, retryDelay(0, time.Second))
	require.Equal(t, 800*time.Millisecond, retryDelay(3, time.Second))
	require.Equal(t, time.Second, retryDelay(4, time.Second))
	require.Equal(t, time.Second, retryDelay(100, time.Second))
}
