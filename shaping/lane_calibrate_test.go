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
