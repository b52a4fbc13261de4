package shaping

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

// TestLaneConcurrencyKnown: a lane whose concurrency is configured knows
// it; one that knows nothing of the provider does not during its slow start, and does once a
// refusal names the provider's calls at a time.
func TestLaneConcurrencyKnown(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	newLane := func(concurrency int) *Lane {
		l, err := NewLane(LaneConfig{Name: "c", Strategy: StrategyAdaptive, Concurrency: concurrency,
			ColdStart: ColdStartStatic, WarmUp: -1, Start: StartFull, MinInterval: -1, Clock: clockwork.NewFakeClockAt(t0)})
		require.NoError(t, err)
		return l
	}
	require.True(t, newLane(4).ConcurrencyKnown(), "configured")

	l := newLane(0)
	require.False(t, l.ConcurrencyKnown(), "slow start")
	ps := sendN(t, l, t0, 1)
	require.NoError(t, ps[0].DoneAt(t0.Add(100*time.Millisecond), Outcome{PromptTokens: 10, CompletionTokens: 10}))
	require.False(t, l.ConcurrencyKnown(), "still growing: %d", l.Snapshot().ConcurrencyLimit)
	ps = sendN(t, l, t0, 2)
	require.NoError(t, ps[1].DoneAt(t0.Add(200*time.Millisecond), Outcome{RateLimited: true, Headers: busyHeaders(true)}))
	require.True(t, l.ConcurrencyKnown(), "learned from a refusal")
	require.Equal(t, 1, l.Snapshot().ConcurrencyLimit)
}
