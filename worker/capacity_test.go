package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCapacityHealth: the health factor falls with the share of failed
// calls (5xx, timeouts; not 429s) and with a p95 latency above the tail
// latency; the allocatable capacity is limit x health x safety - limit x
// reserved, never negative.
func TestCapacityHealth(t *testing.T) {
	t.Parallel()
	var l lane
	ok := Outcome{Class: ClassSuccess, Status: 200}
	for range capacityMinCalls - 1 {
		l.observeHealth(Outcome{Class: ClassRetryable, Status: 503}, time.Second)
	}
	require.Equal(t, 1.0, l.health.factor(10*time.Second), "too few calls to tell")
	for range capacityWindow {
		l.observeHealth(ok, time.Second)
	}
	require.Equal(t, 1.0, l.health.factor(10*time.Second), "the failures left the window")
	for range 10 {
		l.observeHealth(Outcome{Class: ClassRetryable, Code: "timeout"}, time.Second)
	}
	for range capacityWindow {
		l.observeHealth(Outcome{Class: ClassRateLimited, Status: 429}, time.Second)
	}
	require.InDelta(t, 0.9, l.health.factor(10*time.Second), 1e-9, "10 of the last 100 calls failed; 429s are not calls of the window")
	for range 6 {
		l.observeHealth(ok, 20*time.Second)
	}
	require.InDelta(t, 0.9*0.5, l.health.factor(10*time.Second), 1e-9, "p95 of 20 s against 10 s")

	// The example of docs/design/quotas.md, "Normalising capacity": 2,400,000 TPM x 0.9 x 0.85 - 200,000.
	require.InDelta(t, 1_636_000, allocatable(2_400_000, 0.9, 0.85, 200_000.0/2_400_000), 1e-6)
	require.Zero(t, allocatable(100, 0.1, 0.9, 0.1))
}
