package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDrainEstimate(t *testing.T) {
	t.Parallel()
	require.Equal(t, time.Duration(0), drainEstimate(0, 0, 0))
	require.Equal(t, DrainUnknown, drainEstimate(10, 0, 59))
	require.Equal(t, DrainUnknown, drainEstimate(10, 5, 0))
	require.Equal(t, 100*time.Second, drainEstimate(1000, 590, 59), "10 jobs/s")
	require.Equal(t, DrainUnknown, drainEstimate(1<<40, 1, 59), "capped")
}
