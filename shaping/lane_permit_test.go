package shaping

import (
	"context"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

func TestPermitSpentCopies(t *testing.T) {
	t.Parallel()
	lane, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 60, TPM: 1e6, WarmUp: -1, MinInterval: -1, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	ctx := context.Background()

	p, err := lane.Admit(ctx, Request{PromptTokens: 10, MaxOutputTokens: 10})
	require.NoError(t, err)
	q := p
	require.NoError(t, p.Done(Outcome{}))
	require.ErrorIs(t, q.Done(Outcome{}), ErrPermitDone, "a copy is spent with the original")
	q.Cancel()
	require.Equal(t, 0, lane.Snapshot().InFlight)

	// Later permits may reuse the record: the stale copies still cannot
	// touch them.
	for range 10 {
		p2, err := lane.Admit(ctx, Request{PromptTokens: 10, MaxOutputTokens: 10})
		require.NoError(t, err)
		require.ErrorIs(t, p.Done(Outcome{}), ErrPermitDone)
		q.Cancel()
		require.Equal(t, 1, lane.Snapshot().InFlight)
		p2.Cancel()
		require.Equal(t, 0, lane.Snapshot().InFlight)
	}
	s := lane.Snapshot()
	require.InDelta(t, 59, s.Buckets[0].Level, 1e-9, "only the settled permit keeps its request")
	require.InDelta(t, 1e6-20, s.Buckets[1].Level, 1e-9)

	var zero Permit
	require.ErrorIs(t, zero.Done(Outcome{}), ErrPermitDone)
	zero.Cancel()
}
