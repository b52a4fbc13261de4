package shaping

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

// TestLaneSetLimits: new configured limits move the lane's buckets, its
// pacing and its concurrency at once, as a lane built with them would
// have; a bucket the lane lacked is made; 0 leaves a limit as it is; a
// limit a header stated stays; a share applies to the new limits.
func TestLaneSetLimits(t *testing.T) {
	t.Parallel()
	lane, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 60, TPM: 6000, Concurrency: 4, ColdStart: ColdStartStatic,
		WarmUp: -1, Start: StartEmpty, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	limits := func(now time.Time) map[string]float64 {
		out := map[string]float64{}
		for _, b := range lane.SnapshotAt(now).Buckets {
			out[b.Name], out[b.Name+" capacity"] = b.Limit, b.Capacity
		}
		out["concurrency"] = float64(lane.SnapshotAt(now).ConcurrencyLimit)
		return out
	}
	require.Equal(t, map[string]float64{"rpm": 60, "rpm capacity": 60, "tpm": 6000, "tpm capacity": 6000, "concurrency": 4}, limits(t0))
	require.Equal(t, time.Second, lane.pacer.Interval())

	require.NoError(t, lane.SetLimitsAt(sec(1), 600, 60000, 8))
	require.Equal(t, map[string]float64{"rpm": 600, "rpm capacity": 600, "tpm": 60000, "tpm capacity": 60000, "concurrency": 8}, limits(sec(1)))
	require.Equal(t, 100*time.Millisecond, lane.pacer.Interval(), "the pacing follows the RPM")
	// The TPM bucket, empty at 0 s, gathered 100 tokens in the first
	// second at the old rate and refills at the new one from then: 1,000
	// tokens a second, so 2,000 are there at 2.9 s.
	r, err := lane.ReserveAt(sec(1), Request{PromptTokens: 1999, MaxOutputTokens: 1})
	require.NoError(t, err)
	require.WithinDuration(t, sec(2.9), lane.ReadyAt(&r), time.Millisecond)
	lane.CancelAt(sec(1), &r)

	require.NoError(t, lane.SetLimitsAt(sec(2), 0, 3000, 0))
	require.Equal(t, map[string]float64{"rpm": 600, "rpm capacity": 600, "tpm": 3000, "tpm capacity": 3000, "concurrency": 8}, limits(sec(2)),
		"0 leaves a limit as it is; a lowered limit lowers the capacity")

	require.NoError(t, lane.SetShareAt(sec(3), 0.5))
	require.NoError(t, lane.SetLimitsAt(sec(3), 0, 4000, 0))
	require.InDelta(t, 2000, limits(sec(3))["tpm"], 1e-9, "the lane runs on its share of the new limit")

	lane.ObserveAt(sec(4), RateLimitHeaders{LimitTokens: 10000, HasLimitTokens: true})
	require.NoError(t, lane.SetLimitsAt(sec(5), 0, 1000, 0))
	require.InDelta(t, 5000, limits(sec(5))["tpm"], 1e-9, "a limit header is the truth about the minute")

	require.Error(t, lane.SetLimitsAt(sec(6), -1, 0, 0))

	bare, err := NewLane(LaneConfig{Strategy: StrategyAdaptive, ColdStart: ColdStartStatic, WarmUp: -1, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	require.Empty(t, bare.SnapshotAt(t0).Buckets)
	require.NoError(t, bare.SetLimitsAt(t0, 120, 0, 0))
	require.Equal(t, []BucketSnapshot{{Name: "rpm", Level: 120, Capacity: 120, Limit: 120}}, bare.SnapshotAt(t0).Buckets, "a bucket the lane lacked is made, full")
}
