package shaping

import (
	"context"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

func TestLaneCalibration(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(t0)
	lane, err := NewLane(LaneConfig{Strategy: StrategyAdaptive, Clock: clock})
	require.NoError(t, err)
	require.Empty(t, lane.Snapshot().Buckets, "quotas unknown")
	p, err := lane.Admit(context.Background(), Request{PromptTokens: 10, MaxOutputTokens: 10})
	require.NoError(t, err)
	require.NoError(t, p.Done(Outcome{PromptTokens: 10, CompletionTokens: 5, Headers: RateLimitHeaders{
		LimitRequests: 100, HasLimitRequests: true, RemainingRequests: 40, HasRemainingRequests: true,
		LimitTokens: 10000, HasLimitTokens: true, RemainingTokens: 2000, HasRemainingTokens: true,
	}}))
	s := lane.Snapshot()
	require.Len(t, s.Buckets, 2)
	require.Equal(t, BucketSnapshot{Name: "rpm", Level: 40, Capacity: 100, Limit: 100}, s.Buckets[0])
	require.Equal(t, BucketSnapshot{Name: "tpm", Level: 2000, Capacity: 10000, Limit: 10000}, s.Buckets[1])
}

// TestLaneCalibrationSinceSend: a remaining header describes the server at
// the send; the lane adds the refill since, the tokens settlement gave back
// since, and takes off what it reserved that the server had not seen.
func TestLaneCalibrationSinceSend(t *testing.T) {
	t.Parallel()
	lane, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 60, TPM: 6000, WarmUp: -1, MinInterval: -1, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	req := Request{PromptTokens: 100, MaxOutputTokens: 100}
	r1, err := lane.ReserveAt(t0, req)
	require.NoError(t, err)
	p1 := lane.SendAt(t0, r1)
	r2, err := lane.ReserveAt(sec(1), req) // after p1's send: the server's answer to p1 has not seen it
	require.NoError(t, err)
	lane.SendAt(sec(1), r2)
	require.NoError(t, p1.DoneAt(sec(2), Outcome{PromptTokens: 100, CompletionTokens: 50, Headers: RateLimitHeaders{
		RemainingRequests: 50, HasRemainingRequests: true, RemainingTokens: 5000, HasRemainingTokens: true,
	}}))
	s := lane.SnapshotAt(sec(2))
	// RPM: 50 at the send, +2 refilled, -1 unseen (r2).
	require.InDelta(t, 51, s.Buckets[0].Level, 1e-9)
	// TPM: 5000 at the send, +200 refilled, +50 settled back, -200 unseen.
	require.InDelta(t, 5050, s.Buckets[1].Level, 1e-9)

	// A header never raises a level.
	lane.ObserveAt(sec(2), RateLimitHeaders{RemainingRequests: 60, HasRemainingRequests: true, RemainingTokens: 6000, HasRemainingTokens: true})
	s = lane.SnapshotAt(sec(2))
	require.InDelta(t, 51, s.Buckets[0].Level, 1e-9)
	require.InDelta(t, 5050, s.Buckets[1].Level, 1e-9)
}
