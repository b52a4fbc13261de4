package shaping

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

// TestLaneLearnsQuotaFrom429s: adaptive without a TPM quota takes the
// first 429 (with too little taken before it to tell a rate) as a
// reference; at the next one (at least 2.5 s later) the tokens the
// provider took in between, give or take the two refused requests (its
// bucket held less than each), over the time in between are its limit:
// the lane learns 95% of the middle as a TPM bucket with a second of
// burst, empty until its pause ends. A 429 of a request sent before the
// lane reacted is the same event; one sent after, too close to measure,
// cuts by 20%; a quota that binds grows, fast back towards the measure,
// hardly at all around it, faster past it; a limit header replaces it.
func TestLaneLearnsQuotaFrom429s(t *testing.T) {
	t.Parallel()
	lane, err := NewLane(LaneConfig{Strategy: StrategyAdaptive, Concurrency: 64, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	call := func(sent, done float64, tokens int, o Outcome) {
		r, err := lane.ReserveAt(sec(sent), Request{PromptTokens: tokens / 2, MaxOutputTokens: tokens / 2})
		require.NoError(t, err)
		require.NoError(t, lane.SendAt(sec(sent), r).DoneAt(sec(done), o))
	}
	send := func(at float64, o Outcome) { call(at, at, 1000, o) }
	ok := Outcome{PromptTokens: 500, CompletionTokens: 500}
	refused := Outcome{RateLimited: true}
	send(0, refused) // the reference
	for i := range 20 {
		send(0.5*float64(i), ok)
	}
	require.Empty(t, lane.SnapshotAt(sec(10)).Buckets)
	// 20,000 taken in 10 s, give or take 1,000: 114,000 to 126,000 a
	// minute; 95% of the middle, the bucket empty when the 1 s pause ends.
	send(10, refused)
	require.True(t, lane.learned)
	require.Equal(t, []BucketSnapshot{{Name: "tpm", Level: -1900, Capacity: 1900, Limit: 114000}}, lane.SnapshotAt(sec(10)).Buckets)
	require.Equal(t, [3]float64{120000, 114000, 1}, [3]float64{lane.learnCeil, lane.learnLow, b2f(lane.learnMeasured)})
	call(9.9, 10.5, 1000, refused) // sent before the lane reacted: the same event
	require.Equal(t, 114000.0, lane.tpm.Limit())
	send(11, refused) // sent after it, 1 s after the measure: the cut did not do
	require.Equal(t, 0.8*114000, lane.tpm.Limit())

	// The quota binds (the bucket is in debt): each answer grows it by its
	// tokens times 0.06 + 6 x (0.95 x 120,000 / limit - 1) below 95% of
	// the measure, 0.06 between that and the measure, and 0.06 + 0.1 x
	// (how far past / 10%) past it.
	grows := func(at float64, want float64) {
		t.Helper()
		before := lane.tpm.Limit()
		call(at, at, 10000, Outcome{PromptTokens: 5000, CompletionTokens: 5000})
		require.InDelta(t, before+want*10000, lane.tpm.Limit(), 1e-6, "at %v from %v", at, before)
	}
	grows(12, 0.06+6*(0.95*120000/91200-1))
	require.InDelta(t, 106800, lane.tpm.Limit(), 1e-6)
	grows(13, 0.06+6*(0.95*120000/106800-1))
	lane.setLearnedLocked(sec(14), 118000)
	grows(14, 0.06)
	lane.setLearnedLocked(sec(15), 126000)
	grows(15, 0.06+0.1*0.5)
	// Far below the ceiling the spring stops at 95% of it: one answer of
	// 10,000 tokens once took a quota of 10,000 to 635,000.
	lane.setLearnedLocked(sec(16), 10000)
	call(16, 16, 10000, Outcome{PromptTokens: 5000, CompletionTokens: 5000})
	require.Equal(t, 0.95*120000, lane.tpm.Limit())

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

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// TestLaneCutsFromTheRateRefused: a 429 that no measure explains starts
// an episode and cuts the quota to half the rate the provider took over
// the last 10 s, not half the old quota, and empties the bucket until the
// pause (the Retry-After) ends: the first 429 after sending 2,000 tokens
// a second gets a bucket of 1,000 a second at once (it used to get none
// until a second 429), and a lane whose learned quota was at most the
// lowest its measure allowed (the provider lowered its limit) cuts from
// what it sent, then measures the new limit at the next 429.
func TestLaneCutsFromTheRateRefused(t *testing.T) {
	t.Parallel()
	lane, err := NewLane(LaneConfig{Strategy: StrategyAdaptive, Concurrency: 64, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	send := func(at float64, o Outcome) {
		r, err := lane.ReserveAt(sec(at), Request{PromptTokens: 500, MaxOutputTokens: 500})
		require.NoError(t, err)
		require.NoError(t, lane.SendAt(sec(at), r).DoneAt(sec(at), o))
	}
	ok := Outcome{PromptTokens: 500, CompletionTokens: 500}
	for i := range 40 {
		send(0.5*float64(i), ok) // 2,000 a second for 20 s
	}
	// Taken since the sample of 10 s ago: 40,000 - 21,000 in 10 s.
	send(20, Outcome{RateLimited: true, Headers: RateLimitHeaders{RetryAfter: 3 * time.Second, HasRetryAfter: true}})
	require.Equal(t, []BucketSnapshot{{Name: "tpm", Level: -3 * 950, Capacity: 950, Limit: 57000}}, lane.SnapshotAt(sec(20)).Buckets)
	require.Equal(t, sec(23), lane.PausedUntil())
	require.Equal(t, [2]float64{114000, 0}, [2]float64{lane.learnCeil, b2f(lane.learnMeasured)})

	// The next 429, 23 s later after 40,000 more: the limit is 39,000 to
	// 41,000 tokens in 23 s; 95% of the middle.
	for i := range 40 {
		send(23+0.5*float64(i), ok)
	}
	send(43, Outcome{RateLimited: true})
	mid := 60 * 40000.0 / 23
	require.InDelta(t, 0.95*mid, lane.tpm.Limit(), 1e-6)
	require.InDelta(t, 60*39000.0/23, lane.learnLow, 1e-6)
	require.Equal(t, 1.0, b2f(lane.learnMeasured))

	// The provider lowers its limit: a 429 while the quota was below the
	// lowest its measure allowed cuts to half what the lane took over the
	// last 10 s (10,000 - 1,000), whatever its quota.
	for i := range 10 {
		send(44+float64(i), ok)
	}
	require.Greater(t, lane.tpm.Limit(), 0.95*mid)
	send(54, Outcome{RateLimited: true})
	require.InDelta(t, 0.5*60*9000.0/10, lane.tpm.Limit(), 1e-6)
	require.Equal(t, [2]float64{60 * 9000.0 / 10, 0}, [2]float64{lane.learnCeil, b2f(lane.learnMeasured)})
}

// TestLaneLearnsItsShareOfTheQuota: a lane on a share of the provider's
// quota (replicas) measures its own part of what the provider took: the
// provider's limit is its rate over its share, and its bucket its share of
// that, as its configured buckets are its share of the quota. (Its bucket
// once was its share of its own rate: two replicas on halves that each
// sent 120,000 a minute before a 429 learned 57,000 each.)
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
	send(10, Outcome{RateLimited: true}) // 20,000 taken in 10 s: 120,000 a minute, the provider 240,000
	require.True(t, lane.learned)
	require.Equal(t, 228000.0, lane.tpmQ.limit, "95% of the provider's")
	require.Equal(t, 0.5*228000, lane.tpm.Limit())

	// The first 429 cuts from the rate the provider took (its own over
	// its share), not from its own.
	lane, err = NewLane(LaneConfig{Strategy: StrategyAdaptive, Concurrency: 64, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	require.NoError(t, lane.SetShareAt(t0, 0.5))
	for i := range 21 {
		send(0.5*float64(i), Outcome{PromptTokens: 500, CompletionTokens: 500})
	}
	send(10, Outcome{RateLimited: true})
	require.Equal(t, 240000.0, lane.learnCeil)
	require.Equal(t, learnCut*240000, lane.tpmQ.limit)
	// It grows by what the provider took: its own tokens over its share.
	require.Negative(t, lane.tpm.LevelAt(sec(10)), "the learned bucket binds")
	growth := learnFloor + learnSpring*(learnMargin/learnCut-1)
	send(10, Outcome{PromptTokens: 500, CompletionTokens: 500})
	require.InDelta(t, learnCut*240000+growth*1000/0.5, lane.tpmQ.limit, 1e-6)
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

// TestLaneFirstRefusalResumesAtTheMinuteBound: a first 429 within 10 s of
// the lane's first send ends a drain of the provider's bucket, which holds
// at most a minute of its refill: the provider's limit is at least what it
// took over the time plus a minute, and the lane resumes there with no
// spring (the ceiling is the quota over 95%), where half the rate it
// refused was nine times the limit. A 429 of the same event (sent before
// the lane reacted) leaves the reference, whose tokens taken counted it,
// and empties the bucket to the end of the pause its Retry-After extends.
func TestLaneFirstRefusalResumesAtTheMinuteBound(t *testing.T) {
	t.Parallel()
	lane, err := NewLane(LaneConfig{Strategy: StrategyAdaptive, Concurrency: 64, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	reserve := func(at float64) *Permit {
		r, err := lane.ReserveAt(sec(at), Request{PromptTokens: 2500, MaxOutputTokens: 500})
		require.NoError(t, err)
		return lane.SendAt(sec(at), r)
	}
	for i := range 20 {
		require.NoError(t, reserve(0.2*float64(i)).DoneAt(sec(0.2*float64(i)), Outcome{PromptTokens: 2500, CompletionTokens: 500}))
	}
	late := reserve(3.9) // in flight at the first 429, refused after it
	pause := func(s float64) Outcome {
		return Outcome{RateLimited: true, Headers: RateLimitHeaders{RetryAfter: time.Duration(s * float64(time.Second)), HasRetryAfter: true}}
	}
	require.NoError(t, reserve(4).DoneAt(sec(4), pause(1)))
	// 63,000 taken in 4 s (the refused request in flight too): at least
	// 63,000 / 64 s.
	low := 60 * 63000.0 / 64
	require.InDelta(t, low, lane.tpm.Limit(), 1e-6)
	require.InDelta(t, low/0.95, lane.learnCeil, 1e-6)
	require.Equal(t, 63000.0, lane.refusedTaken)
	require.Equal(t, sec(5), lane.PausedUntil())
	require.InDelta(t, -low/60, lane.tpm.LevelAt(sec(4)), 1e-6)

	require.NoError(t, late.DoneAt(sec(4.5), pause(3)))
	require.Equal(t, 60000.0, lane.refusedTaken, "the reference's taken, less the same event's refusal")
	require.Equal(t, sec(7.5), lane.PausedUntil())
	require.InDelta(t, 0, lane.tpm.LevelAt(sec(7.5)), 1e-6, "empty until the pause ends")
}

// TestLaneSpreadsSendsUntilItLearns: a lane that knows no quota (none
// configured, no headers, none learned) spaces its sends by the latency of
// its answers over its concurrency limit, so that the calls an answer
// frees do not leave in a bunch that an empty provider refuses whole; the
// learned bucket spaces them from the first 429 on.
func TestLaneSpreadsSendsUntilItLearns(t *testing.T) {
	t.Parallel()
	lane, err := NewLane(LaneConfig{Strategy: StrategyAdaptive, Concurrency: 8, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	call := func(at float64, o Outcome) {
		r, err := lane.ReserveAt(sec(at), Request{PromptTokens: 100, MaxOutputTokens: 100})
		require.NoError(t, err)
		require.NoError(t, lane.SendAt(sec(at), r).DoneAt(sec(at+0.4), o))
	}
	ok := Outcome{PromptTokens: 100, CompletionTokens: 100}
	call(0, ok)
	limit := time.Duration(lane.slots.Limit())
	require.Equal(t, 400*time.Millisecond/limit, lane.pacer.Interval())
	call(1, Outcome{PromptTokens: 100, CompletionTokens: 100, Latency: 900 * time.Millisecond})
	limit = time.Duration(lane.slots.Limit())
	require.Equal(t, 500*time.Millisecond/limit, lane.pacer.Interval(), "an average of the latencies: 400 ms + 0.2 x 500 ms")
	r1, err := lane.ReserveAt(sec(2), Request{PromptTokens: 100, MaxOutputTokens: 100})
	require.NoError(t, err)
	r2, err := lane.ReserveAt(sec(2), Request{PromptTokens: 100, MaxOutputTokens: 100})
	require.NoError(t, err)
	require.Equal(t, sec(2), lane.PaceReservationAt(sec(2), &r1))
	require.Equal(t, sec(2).Add(500*time.Millisecond/limit), lane.PaceReservationAt(sec(2), &r2))

	call(3, Outcome{RateLimited: true})
	require.Zero(t, lane.pacer.Interval(), "the learned bucket spaces the sends")

	// An RPM from the headers paces at its interval.
	lane, err = NewLane(LaneConfig{Strategy: StrategyAdaptive, Concurrency: 8, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	call(0, ok)
	require.Positive(t, lane.pacer.Interval())
	call(1, Outcome{PromptTokens: 100, CompletionTokens: 100, Headers: RateLimitHeaders{LimitRequests: 600, HasLimitRequests: true}})
	require.Equal(t, 100*time.Millisecond, lane.pacer.Interval())
}
