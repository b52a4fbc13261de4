package shaping

import (
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

func TestLaneSharedQuotaAllOrNothing(t *testing.T) {
	t.Parallel()
	tenant, err := NewBucket(BucketConfig{Name: "tenant", Limit: 100}, t0)
	require.NoError(t, err)
	lane, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 60, TPM: 1e6, WarmUp: -1, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	_, err = lane.ReserveAt(t0, Request{PromptTokens: 150, MaxOutputTokens: 1, Quotas: []Quota{{Bucket: tenant, Unit: UnitTokens}}})
	require.ErrorIs(t, err, ErrTooLarge)
	s := lane.SnapshotAt(t0)
	require.InDelta(t, 60, s.Buckets[0].Level, 1e-9, "nothing reserved in the other buckets")
	require.InDelta(t, 100, tenant.LevelAt(t0), 1e-9)
}
