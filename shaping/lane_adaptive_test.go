package shaping

import (
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

// TestLaneLearnsQuotaFrom429s: adaptive without a TPM quota takes the
// first 429 as a reference; at the next one (at least 2.5 s later) the
// tokens the provider took in between (sent, less refused) over the time
// in between are its limit, and the lane learns 95% of it as a TPM bucket
// with a second of burst. A 429 closer than that is the same event; a
// later one cuts the quota to 95% of the new rate, by at most 20%, never
// up; a quota that binds grows, fast back towards where a refusal found
// it; a limit header replaces it.
func TestLaneLearnsQuotaFrom429s(t *testing.T) {
	t.Parallel()
	lane, err := NewLane(LaneConfig{Strategy: StrategyAdaptive, Concurrency: 64, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	send := func(at float64, o Outcome) {
		r, err := lane.ReserveAt(sec(at), Request{PromptTokens: 500, MaxOutputTokens: 500})
		require.NoError(t, err)
		require.NoError(t, lane.SendAt(sec(at), r).DoneAt(sec(at), o))
	}
	ok := Outcome{PromptTokens: 500, CompletionTokens: 500}
	refused := Outcome{RateLimited: true}
	send(0, refused) // the reference
	for i := range 20 {
		send(0.5*float64(i), ok)
	}
	require.Empty(t, lane.SnapshotAt(sec(10)).Buckets)
	send(10, refused) // 20,000 taken in 10 s: 2,000 a second
	require.True(t, lane.learned)
	require.Equal(t, []BucketSnapshot{{Name: "tpm", Level: 0, Capacity: 1900, Limit: 114000}}, lane.SnapshotAt(sec(10)).Buckets)
	send(11, refused) // the same event
	require.Equal(t, 114000.0, lane.tpm.Limit())

	// The quota binds (the bucket is in debt): each answer grows it by
	// (0.1 + 2 x (1.25 - 1)) of its tokens per limit.
	r, err := lane.ReserveAt(sec(11), Request{PromptTokens: 5000, MaxOutputTokens: 5000})
	require.NoError(t, err)
	require.NoError(t, lane.SendAt(sec(11), r).DoneAt(sec(11), Outcome{PromptTokens: 5000, CompletionTokens: 5000}))
	require.InDelta(t, 114000*(1+0.6*10000/114000), lane.tpm.Limit(), 1e-6)

	// 13.5 s later, 10,000 more taken: far below, but one refusal cuts by
	// at most 20%.
	before := lane.tpm.Limit()
	send(24.5, refused)
	require.InDelta(t, 0.8*before, lane.tpm.Limit(), 1e-6)
	require.Equal(t, before, lane.learnBest)

	// A limit header replaces the learned quota.
	lane.ObserveAt(sec(25), RateLimitHeaders{LimitTokens: 90000, HasLimitTokens: true})
	require.False(t, lane.learned)
	require.Equal(t, 90000.0, lane.tpm.Limit())
	send(40, refused)
	require.Equal(t, 90000.0, lane.tpm.Limit(), "a quota from the headers is not learned")

	// Shape, or a quota from the configuration, learns nothing.
	shape, err := NewLane(LaneConfig{Strategy: StrategyShape, TPM: 60000, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	require.False(t, shape.learnsTPM())
	configured, err := NewLane(LaneConfig{Strategy: StrategyAdaptive, TPM: 60000, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	require.False(t, configured.learnsTPM())
}

// TestLaneLearnsItsShareOfTheQuota: a lane on a share of the provider's
// quota (replicas) learns from its 429s a bucket of its share of the rate
// it measured, as its configured buckets are its share of the quota.
func TestLaneLearnsItsShareOfTheQuota(t *testing.T) {
	t.Parallel()
	lane, err := NewLane(LaneConfig{Strategy: StrategyAdaptive, Concurrency: 64, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	require.NoError(t, lane.SetShareAt(t0, 0.5))
	send := func(at float64, o Outcome) {
		r, err := lane.ReserveAt(sec(at), Request{PromptTokens: 500, MaxOutputTokens: 500})
		require.NoError(t, err)
		require.NoError(t, lane.SendAt(sec(at), r).DoneAt(sec(at), o))
	}
	send(0, Outcome{RateLimited: true})
	for i := range 20 {
		send(0.5*float64(i), Outcome{PromptTokens: 500, CompletionTokens: 500})
	}
	send(10, Outcome{RateLimited: true}) // 20,000 taken in 10 s: 95% of 120,000 a minute
	require.True(t, lane.learned)
	require.Equal(t, 0.5*114000, lane.tpm.Limit())
}

// TestAdaptiveGuideFollowsTheShare: adaptive's controller is guided by
// the lane's quotas as they are in force: the configured ones when the
// lane is made, its share of them once it runs on a share.
func TestAdaptiveGuideFollowsTheShare(t *testing.T) {
	t.Parallel()
	lane, err := NewLane(LaneConfig{Strategy: StrategyAdaptive, RPM: 600, TPM: 60000, Concurrency: 8,
		Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	e, ok := lane.ctrl.(*Elastic)
	require.True(t, ok)
	require.Equal(t, [2]float64{600, 60000}, [2]float64{e.rpm, e.tpm})
	require.NoError(t, lane.SetShareAt(t0, 0.25))
	require.Equal(t, [2]float64{150, 15000}, [2]float64{e.rpm, e.tpm})
}

// TestAdaptiveBucketFromHeadersOnAShare: an adaptive lane with no quota
// makes its bucket from the first limit header, and on a share it is its
// share of that limit, as a configured one would be.
func TestAdaptiveBucketFromHeadersOnAShare(t *testing.T) {
	t.Parallel()
	buckets := func(share float64) []BucketSnapshot {
		lane, err := NewLane(LaneConfig{Strategy: StrategyAdaptive, Concurrency: 8, Clock: clockwork.NewFakeClockAt(t0)})
		require.NoError(t, err)
		require.NoError(t, lane.SetShareAt(t0, share))
		lane.ObserveAt(t0, RateLimitHeaders{LimitTokens: 60000, HasLimitTokens: true})
		return lane.SnapshotAt(t0).Buckets
	}
	require.Equal(t, []BucketSnapshot{{Name: "tpm", Level: 60000, Capacity: 60000, Limit: 60000}}, buckets(1))
	require.Equal(t, []BucketSnapshot{{Name: "tpm", Level: 15000, Capacity: 15000, Limit: 15000}}, buckets(0.25))
}
