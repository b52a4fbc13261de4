package shaping

import (
	"context"
	"testing"
	"time"

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
	r1, err := lane.ReserveAt(sec(1), req)
	require.NoError(t, err)
	p1 := lane.SendAt(sec(1), r1)
	r2, err := lane.ReserveAt(sec(2), req) // after p1's send: the server's answer to p1 has not seen it
	require.NoError(t, err)
	lane.SendAt(sec(2), r2)
	require.NoError(t, p1.DoneAt(sec(3), Outcome{PromptTokens: 100, CompletionTokens: 50, Headers: RateLimitHeaders{
		RemainingRequests: 50, HasRemainingRequests: true, RemainingTokens: 5000, HasRemainingTokens: true,
	}}))
	s := lane.SnapshotAt(sec(3))
	// RPM: 50 at the send, +2 refilled, -1 unseen (r2).
	require.InDelta(t, 51, s.Buckets[0].Level, 1e-9)
	// TPM: 5000 at the send, +200 refilled, +50 settled back, -200 unseen.
	require.InDelta(t, 5050, s.Buckets[1].Level, 1e-9)

	// A header never raises a level.
	lane.ObserveAt(sec(3), RateLimitHeaders{RemainingRequests: 60, HasRemainingRequests: true, RemainingTokens: 6000, HasRemainingTokens: true})
	s = lane.SnapshotAt(sec(3))
	require.InDelta(t, 51, s.Buckets[0].Level, 1e-9)
	require.InDelta(t, 5050, s.Buckets[1].Level, 1e-9)

	// A permit sent after a settlement: only the settlements since its send
	// are added to the server's count.
	r3, err := lane.ReserveAt(sec(3), req)
	require.NoError(t, err)
	p3 := lane.SendAt(sec(3), r3) // the lane has given back 50 tokens so far
	require.NoError(t, p3.DoneAt(sec(3), Outcome{PromptTokens: 100, CompletionTokens: 100, Headers: RateLimitHeaders{
		RemainingTokens: 4000, HasRemainingTokens: true,
	}}))
	// 4000 at the send; nothing refilled, settled or reserved since (the
	// 50 given back before it are in the server's count already).
	require.InDelta(t, 4000, lane.SnapshotAt(sec(3)).Buckets[1].Level, 1e-9)
}

// TestLaneCalibrationLimits: a limit header replaces a bucket's limit when it
// differs by half a token or more (the capacity follows), creates the bucket
// for adaptive only, sets the pacing when it was derived from the RPM, and
// guides the controller.
func TestLaneCalibrationLimits(t *testing.T) {
	t.Parallel()
	lane, err := NewLane(LaneConfig{Strategy: StrategyAdaptive, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	lane.ObserveAt(t0, RateLimitHeaders{LimitRequests: 120, HasLimitRequests: true})
	require.Equal(t, []BucketSnapshot{{Name: "rpm", Level: 120, Capacity: 120, Limit: 120}}, lane.SnapshotAt(t0).Buckets, "created full")
	require.Equal(t, 500*time.Millisecond, lane.pacer.Interval(), "one RPM period")
	e := lane.ctrl.(*Elastic)
	require.Equal(t, [2]float64{120, 0}, [2]float64{e.rpm, e.tpm}, "the controller is guided")

	lane.ObserveAt(t0, RateLimitHeaders{LimitRequests: 120.4, HasLimitRequests: true, LimitTokens: 6000, HasLimitTokens: true})
	require.Equal(t, []BucketSnapshot{
		{Name: "rpm", Level: 120, Capacity: 120, Limit: 120},
		{Name: "tpm", Level: 6000, Capacity: 6000, Limit: 6000},
	}, lane.SnapshotAt(t0).Buckets, "less than half a request: no change")
	require.Equal(t, [2]float64{120, 6000}, [2]float64{e.rpm, e.tpm})

	lane.ObserveAt(sec(1), RateLimitHeaders{LimitRequests: 60, HasLimitRequests: true, LimitTokens: 6000.5, HasLimitTokens: true})
	require.Equal(t, []BucketSnapshot{
		{Name: "rpm", Level: 60, Capacity: 60, Limit: 60},
		{Name: "tpm", Level: 6000, Capacity: 6000.5, Limit: 6000.5},
	}, lane.SnapshotAt(sec(1)).Buckets, "the capacity follows the limit")
	require.Equal(t, time.Second, lane.pacer.Interval())
	require.Equal(t, [2]float64{60, 6000.5}, [2]float64{e.rpm, e.tpm})

	// Shape does not create a bucket it was not configured with, and keeps
	// a configured pacing.
	shape, err := NewLane(LaneConfig{Strategy: StrategyShape, TPM: 6000, WarmUp: -1, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	shape.ObserveAt(t0, RateLimitHeaders{LimitRequests: 120, HasLimitRequests: true, RemainingRequests: 1, HasRemainingRequests: true})
	require.Equal(t, []BucketSnapshot{{Name: "tpm", Level: 6000, Capacity: 6000, Limit: 6000}}, shape.SnapshotAt(t0).Buckets)
	require.Zero(t, shape.pacer.Interval())
	paced, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 60, TPM: 6000, MinInterval: 2 * time.Second, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	paced.ObserveAt(t0, RateLimitHeaders{LimitRequests: 120, HasLimitRequests: true})
	require.Equal(t, 2*time.Second, paced.pacer.Interval(), "configured, not derived")

	// rpm keeps no TPM bucket; retry ignores headers.
	rpm, err := NewLane(LaneConfig{Strategy: StrategyRPM, RPM: 60, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	rpm.ObserveAt(t0, RateLimitHeaders{LimitTokens: 6000, HasLimitTokens: true, RemainingTokens: 1, HasRemainingTokens: true})
	require.Equal(t, []BucketSnapshot{{Name: "rpm", Level: 60, Capacity: 60, Limit: 60}}, rpm.SnapshotAt(t0).Buckets)
	retry, err := NewLane(LaneConfig{Strategy: StrategyRetry, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	retry.ObserveAt(t0, RateLimitHeaders{LimitRequests: 120, HasLimitRequests: true, LimitTokens: 6000, HasLimitTokens: true})
	require.Empty(t, retry.SnapshotAt(t0).Buckets)
}
