package shaping

import (
	"math"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

// headers is an OK answer's headers from a 600 RPM / 60k TPM provider.
func headers600(remReq, remTok float64) RateLimitHeaders {
	h := remaining(remReq, remTok)
	h.LimitRequests, h.HasLimitRequests = 600, true
	h.LimitTokens, h.HasLimitTokens = 60000, true
	return h
}

func snapshotBuckets(l *Lane, now time.Time) []BucketSnapshot { return l.SnapshotAt(now).Buckets }

// requireBucketsNear compares bucket snapshots to a float's rounding.
func requireBucketsNear(t *testing.T, want, got []BucketSnapshot) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		w, g := want[i], got[i]
		require.Equal(t, w.Name, g.Name)
		require.InDeltaSlice(t, []float64{w.Level, w.Capacity, w.Limit}, []float64{g.Level, g.Capacity, g.Limit}, 1e-6, w.Name)
	}
}

// TestLaneColdStartProbe: a shape lane with its quota starts with the
// probe (one request, and a full bucket of 5 s of token refill, so the
// first request goes at once whatever its size), warming up from it; the
// first answer's headers end the warm-up and set the levels, which makes
// the queued reservation ready at once. Until the provider has admitted
// more than a short bucket holds, a send its trials do not hold is paced;
// after, a send is paced only when it leaves a bucket with less than a
// second of refill.
func TestLaneColdStartProbe(t *testing.T) {
	t.Parallel()
	lane, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 600, TPM: 60000, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	require.Equal(t, []BucketSnapshot{
		{Name: "rpm", Level: 1, Capacity: 50, Limit: 600},
		{Name: "tpm", Level: 5000, Capacity: 5000, Limit: 60000},
	}, snapshotBuckets(lane, t0))
	require.Equal(t, ProviderUnknown, lane.SnapshotAt(t0).Provider)

	r1, err := lane.ReserveAt(t0, Request{PromptTokens: 7000, MaxOutputTokens: 1000})
	require.NoError(t, err)
	require.Equal(t, t0, r1.ReadyAt, "the probe goes at once, larger than the probe's bucket")
	_, err = lane.ReserveAt(t0, Request{PromptTokens: 60001})
	require.ErrorIs(t, err, ErrTooLarge, "up to the provider's limit, not the probe's")
	r2, err := lane.ReserveAt(t0, Request{PromptTokens: 200, MaxOutputTokens: 100})
	require.NoError(t, err)
	// The warm-up (10 s from 0) brings 3300 tokens after sqrt(2*10*3300/1000) s.
	require.Equal(t, t0.Add(time.Duration(math.Ceil(math.Sqrt(66)*1e9))), r2.ReadyAt)

	p1 := lane.SendAt(t0, r1)
	require.NoError(t, p1.DoneAt(sec(1), Outcome{Headers: headers600(599, 52000)}))
	require.Equal(t, []BucketSnapshot{
		// 599 + 9 refilled (the second since the send, less the send
		// skew: the request may have reached the server 0.1 s late), at
		// most 600 less the skew's refill (r2 may reach a full server
		// 0.1 s late), less r2 unseen.
		{Name: "rpm", Level: 598, Capacity: 600, Limit: 600},
		{Name: "tpm", Level: 52000 + 900 - 300, Capacity: 60000, Limit: 60000},
	}, snapshotBuckets(lane, sec(1)))
	require.False(t, lane.rpm.warmingAt(sec(1)) || lane.tpm.warmingAt(sec(1)), "the warm-up ended")
	require.Equal(t, sec(1), lane.ReadyAt(&r2), "r2 is ready at once")
	require.Equal(t, ProviderUnknown, lane.SnapshotAt(sec(1)).Provider, "8000 admitted: a short bucket could hold it")

	// Unknown kind: the first send the trials (lane_trial.go) do not hold
	// is the canary and goes now (r3's 5,024 tokens are more than the
	// tokens' trial, 5 s of refill, holds past r2); the next is paced after
	// the canary's pacing slot.
	require.Equal(t, sec(1), lane.PaceReservationAt(sec(1), &r2))
	r3, err := lane.ReserveAt(sec(1), Request{PromptTokens: 4000})
	require.NoError(t, err)
	require.Equal(t, sec(1), lane.PaceReservationAt(sec(1), &r3))
	require.True(t, r3.canary)
	r3b, err := lane.ReserveAt(sec(1), Request{PromptTokens: 1})
	require.NoError(t, err)
	require.Equal(t, sec(1.2), lane.PaceReservationAt(sec(1), &r3b))
	lane.CancelAt(sec(1), &r3b)

	// An answer showing 12,000 admitted (more than 2 x 5 s of refill): a
	// minute bucket. Bursts go at once, until a bucket is near empty.
	p2 := lane.SendAt(sec(1), r2)
	require.NoError(t, p2.DoneAt(sec(2), Outcome{Headers: headers600(590, 48000)}))
	require.Equal(t, ProviderMinute, lane.SnapshotAt(sec(2)).Provider)
	r4, err := lane.ReserveAt(sec(2), Request{PromptTokens: 100})
	require.NoError(t, err)
	require.Equal(t, sec(2), lane.PaceReservationAt(sec(2), &r4), "a full bucket: not paced")
	r5, err := lane.ReserveAt(sec(2), Request{PromptTokens: 48000})
	require.NoError(t, err)
	require.Less(t, levels(lane, sec(2))[1], 1000.0)
	require.Equal(t, sec(2), lane.PaceReservationAt(sec(2), &r5), "the pacer is free")
	r6, err := lane.ReserveAt(sec(2), Request{PromptTokens: 100})
	require.NoError(t, err)
	require.Equal(t, sec(2.1), lane.PaceReservationAt(sec(2), &r6), "near empty: paced")
}

// TestLaneColdStartNoHeaders: answers without rate-limit headers leave the
// warm-up running and the burst at the probe's; the snapshot says so.
func TestLaneColdStartNoHeaders(t *testing.T) {
	t.Parallel()
	lane, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 600, TPM: 60000, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	r, err := lane.ReserveAt(t0, Request{PromptTokens: 100})
	require.NoError(t, err)
	require.NoError(t, lane.SendAt(t0, r).DoneAt(sec(1), Outcome{PromptTokens: 100, CompletionTokens: 10,
		Headers: RateLimitHeaders{RetryAfter: time.Second, HasRetryAfter: true}}))
	require.Equal(t, ProviderNoHeaders, lane.SnapshotAt(sec(1)).Provider)
	require.True(t, lane.tpm.warmingAt(sec(1)))
	require.Equal(t, []BucketSnapshot{
		{Name: "rpm", Level: 50, Capacity: 50, Limit: 600}, // refilled, at most 5 s
		{Name: "tpm", Level: 5000, Capacity: 5000, Limit: 60000},
	}, snapshotBuckets(lane, sec(60)))
	// Headers later: the lane learns from them after all.
	lane.ObserveAt(sec(60), headers600(600, 60000))
	require.Equal(t, ProviderUnknown, lane.SnapshotAt(sec(60)).Provider)
	require.Equal(t, []BucketSnapshot{
		{Name: "rpm", Level: 600, Capacity: 600, Limit: 600},
		{Name: "tpm", Level: 60000, Capacity: 60000, Limit: 60000},
	}, snapshotBuckets(lane, sec(60)))
}

// TestLaneStaticWarmUp: a static lane (a provider with burst protection)
// warms up from empty as configured; a header lowers its levels during the
// warm-up but raises them only after it, and every send is paced.
func TestLaneStaticWarmUp(t *testing.T) {
	t.Parallel()
	lane, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 600, TPM: 60000, ColdStart: ColdStartStatic, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	require.Equal(t, []float64{0, 0}, levels(lane, t0))
	lane.ObserveAt(sec(2), headers600(600, 60000))
	require.Equal(t, []float64{2, 200}, levels(lane, sec(2)), "the warm-up's cum(2 s); no raise")
	lane.ObserveAt(sec(2), headers600(1, 100))
	require.Equal(t, []float64{1, 100}, levels(lane, sec(2)), "lowered")
	lane.ObserveAt(sec(10), headers600(600, 60000))
	require.Equal(t, []float64{600, 60000}, levels(lane, sec(10)), "after the warm-up, raised")
	r, err := lane.ReserveAt(sec(10), Request{PromptTokens: 100})
	require.NoError(t, err)
	require.Equal(t, sec(10), lane.PaceReservationAt(sec(10), &r))
	require.Equal(t, sec(10.1), lane.PaceReservationAt(sec(10), &r), "paced even with full buckets")
}

// TestLaneShortBucketDetected: a 429 while the headers showed room for
// twice the request means a short bucket: the lane caps its burst to the
// deficit the provider admitted (the largest an answer or the refusal
// showed, at least a second of refill), lowers its level to match, paces
// every send, and lets the burst grow with what the provider admits later;
// a further refusal with room of a request sent after it learned halves
// it, one sent before is no news. A 429 with no room does not.
func TestLaneShortBucketDetected(t *testing.T) {
	t.Parallel()
	lane, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 600, TPM: 60000, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	send := func(at float64, tokens int) *Permit {
		r, err := lane.ReserveAt(sec(at), Request{PromptTokens: tokens})
		require.NoError(t, err)
		return lane.SendAt(sec(at), r)
	}
	require.NoError(t, send(0, 1000).DoneAt(sec(1), Outcome{Headers: headers600(599, 59000)}))
	p2, p3, p4 := send(1, 2000), send(1, 2000), send(1, 2000)
	require.NoError(t, p2.DoneAt(sec(1), Outcome{Headers: headers600(597, 56000)}))
	require.Equal(t, ProviderUnknown, lane.SnapshotAt(sec(1)).Provider)
	// Refused with 55,000 remaining: a deficit of 5,000 admitted, more
	// than any answer showed (4,000).
	require.NoError(t, p3.DoneAt(sec(1), Outcome{RateLimited: true, Headers: headers600(595, 55000)}))
	s := lane.SnapshotAt(sec(1))
	require.Equal(t, ProviderShort, s.Provider)
	require.Equal(t, []BucketSnapshot{
		// Bursts of 10 requests (a second; 5 admitted) and 5000 tokens;
		// both buckets empty at the refusal (it does not say which one
		// refused). p4 left at p3's instant and may have reached the
		// server first: the refusal's remaining may count it already.
		{Name: "rpm", Level: 0, Capacity: 10, Limit: 600},
		{Name: "tpm", Level: 0, Capacity: 5000, Limit: 60000},
	}, s.Buckets)
	require.True(t, lane.paceAll)
	// p4 was sent before the lane learned: its refusal is no news.
	require.NoError(t, p4.DoneAt(sec(1), Outcome{RateLimited: true, Headers: headers600(594, 55000)}))
	require.Equal(t, []float64{10, 5000}, []float64{lane.rpm.Capacity(), lane.tpm.Capacity()})

	// The provider admits more: the burst grows with it, never above the
	// limit.
	require.NoError(t, send(3, 100).DoneAt(sec(3), Outcome{Headers: headers600(590, 54500)}))
	require.Equal(t, []float64{10, 5500}, []float64{lane.rpm.Capacity(), lane.tpm.Capacity()})
	// Refused with room again: the burst halves, to at least a second.
	require.NoError(t, send(3, 100).DoneAt(sec(3), Outcome{RateLimited: true, Headers: headers600(590, 55000)}))
	require.Equal(t, []float64{10, 2750}, []float64{lane.rpm.Capacity(), lane.tpm.Capacity()})
	require.Equal(t, uint64(3), lane.SnapshotAt(sec(3)).RateLimited)

	// The limit halves: a short bucket holds a time of refill, so the burst
	// halves with it.
	lane.ObserveAt(sec(4), RateLimitHeaders{LimitTokens: 30000, HasLimitTokens: true})
	require.Equal(t, 1375.0, lane.tpm.Capacity())

	// A refusal whose deficit is more than a short bucket holds (the
	// minute was not full to start with): the burst is at most twice
	// ShortBucket of refill.
	low, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 600, TPM: 60000, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	r0, err := low.ReserveAt(t0, Request{PromptTokens: 1000})
	require.NoError(t, err)
	require.NoError(t, low.SendAt(t0, r0).DoneAt(sec(1), Outcome{RateLimited: true, Headers: headers600(590, 20000)}))
	require.Equal(t, ProviderShort, low.SnapshotAt(sec(1)).Provider)
	require.Equal(t, 10000.0, low.tpm.Capacity(), "10 s of 1,000 a second, not the 40,000 deficit")

	// Room for the request but not for twice it is not a short bucket: the
	// provider may just have been spent by someone else.
	other, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 600, TPM: 60000, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	r, err := other.ReserveAt(t0, Request{PromptTokens: 1000})
	require.NoError(t, err)
	require.NoError(t, other.SendAt(t0, r).DoneAt(sec(1), Outcome{RateLimited: true, Headers: headers600(100, 2*2024-1)}))
	require.Equal(t, ProviderUnknown, other.SnapshotAt(sec(1)).Provider)
}

// TestLaneShareSeam: three lanes on a third of the quota each, fed the same
// headers, spend together what one lane on the whole quota spends (the
// bucket from the first header, then the refill), to a request each; their
// snapshots show the share.
func TestLaneShareSeam(t *testing.T) {
	t.Parallel()
	newLane := func(share float64) *Lane {
		l, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 600, TPM: 60000, Clock: clockwork.NewFakeClockAt(t0)})
		require.NoError(t, err)
		require.NoError(t, l.SetShareAt(t0, share))
		return l
	}
	one := newLane(1)
	three := []*Lane{newLane(1.0 / 3), newLane(1.0 / 3), newLane(1.0 / 3)}
	requireBucketsNear(t, []BucketSnapshot{
		{Name: "rpm", Level: 1, Capacity: 50.0 / 3, Limit: 200}, // the probe's request
		{Name: "tpm", Level: 5000.0 / 3, Capacity: 5000.0 / 3, Limit: 20000},
	}, snapshotBuckets(three[0], t0))
	require.Equal(t, 1.0/3, three[0].SnapshotAt(t0).Share)
	// spend admits 1000-token requests ready at once; it returns how many.
	spend := func(l *Lane, now time.Time) int {
		n := 0
		for {
			r, err := l.ReserveAt(now, Request{PromptTokens: 500, MaxOutputTokens: 500})
			require.NoError(t, err)
			if r.ReadyAt.After(now) {
				l.CancelAt(now, &r)
				return n
			}
			l.SendAt(now, r)
			n++
		}
	}
	// Two providers of 600 RPM / 60k TPM: one serves the lane alone, the
	// other the three; each charges what it is sent, refills 5 s between
	// rounds, and answers with its remaining.
	var total1, total3 int
	rem1, rem3 := 60000.0, 60000.0
	for i := range 10 {
		now := sec(float64(5 * i))
		one.ObserveAt(now, headers600(600, rem1))
		n1 := spend(one, now)
		n3 := 0
		for _, l := range three {
			l.ObserveAt(now, headers600(600, rem3))
			n3 += spend(l, now)
		}
		require.InDelta(t, n1, n3, 3, "round %d: a request each at most", i)
		total1, total3 = total1+n1, total3+n3
		rem1 = min(60000, rem1-1000*float64(n1)+5000)
		rem3 = min(60000, rem3-1000*float64(n3)+5000)
	}
	t.Logf("one lane %d requests, three lanes on a third %d", total1, total3)
	require.InDelta(t, total1, total3, 3)
	require.Equal(t, 60+9*5, total1, "the bucket once, then the refill")

	// A replica's share changes: the lane's refill and capacity follow; the
	// level is its credit at the provider and stays (cut to the capacity),
	// and a header may lower it but, on a share below 1, not raise it; a
	// share out of (0, 1] is refused.
	l := newLane(1.0 / 3)
	l.ObserveAt(t0, headers600(600, 60000))
	require.InDelta(t, 20000, levels(l, t0)[1], 1e-6, "the first header ends the probe")
	require.NoError(t, l.SetShareAt(t0, 0.5))
	requireBucketsNear(t, []BucketSnapshot{
		{Name: "rpm", Level: 200, Capacity: 300, Limit: 300},
		{Name: "tpm", Level: 20000, Capacity: 30000, Limit: 30000},
	}, snapshotBuckets(l, t0))
	l.ObserveAt(t0, headers600(600, 60000))
	require.InDelta(t, 20000, levels(l, t0)[1], 1e-6, "not raised")
	l.ObserveAt(t0, headers600(600, 30000))
	require.InDelta(t, 15000, levels(l, t0)[1], 1e-6, "lowered to half of what remains")
	require.NoError(t, l.SetShareAt(t0, 0.2))
	require.InDelta(t, 12000, levels(l, t0)[1], 1e-6, "cut to the capacity")
	for _, bad := range []float64{-1, 1.5, math.NaN()} {
		require.ErrorIs(t, l.SetShareAt(t0, bad), ErrInvalidConfig)
	}
	require.Equal(t, 0.2, l.Share())
}

// TestLaneShortBucketReanchored: on a known short bucket the lane reads
// its level as the minute's remaining less the anchor, the remaining of a
// refusal. A later refusal where the anchor said the short bucket held
// more than twice the request shows the minute drifted from it (it refills
// on while a full short bucket does not): the anchor moves to the new
// refusal's remaining. One the anchor explains leaves it. Before, a holder
// of three replicas on a 5 s bucket was refused a third of its calls for
// minutes, its anchor 9,000 tokens behind.
func TestLaneShortBucketReanchored(t *testing.T) {
	t.Parallel()
	lane, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 600, TPM: 60000, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	refuse := func(at float64, tokens int, remaining float64) {
		t.Helper()
		r, err := lane.ReserveAt(sec(at), Request{PromptTokens: tokens - 1, MaxOutputTokens: 1})
		require.NoError(t, err)
		require.NoError(t, lane.SendAt(sec(at), r).DoneAt(sec(at), Outcome{RateLimited: true, Headers: headers600(590, remaining)}))
	}
	refuse(0, 1000, 55000)
	require.Equal(t, ProviderShort, lane.SnapshotAt(sec(0)).Provider)
	require.Equal(t, 55000.0, lane.tpmQ.anchor)
	// The anchor says 3,000 tokens held, more than twice the 1,000 refused.
	refuse(2, 1000, 58000)
	require.Equal(t, 58000.0, lane.tpmQ.anchor)
	// It says 500 held: the refusal is explained.
	refuse(3, 1000, 58500)
	require.Equal(t, 58000.0, lane.tpmQ.anchor)
}

// TestLaneEarlyTrial: before its probe's answer, a lane with its quota
// configured sends at once, unpaced, what a second of the quota holds: a
// second of requests and as many requests as a second of tokens holds at
// the default max output (162 at 60k RPM / 10M TPM, 10 at 600 RPM / 1M
// TPM, the probe alone at 600 RPM / 60k TPM); the next waits for the
// warm-up. A lane put on a share of the quota before any answer probes
// alone. The trials the first answer starts (lane_trial.go) count the
// early trial spent at its request's send and the refill since: 50 at 600
// RPM, less the 10 sent, plus 2 in 0.2 s.
func TestLaneEarlyTrial(t *testing.T) {
	t.Parallel()
	req := Request{PromptTokens: 20, MaxOutputTokens: 100}
	// immediate reserves n at t0 and reports how many were ready at once
	// and unpaced.
	immediate := func(lane *Lane, n int) (int, []Reservation) {
		at, rs := 0, make([]Reservation, 0, n)
		for range n {
			r, err := lane.ReserveAt(t0, req)
			require.NoError(t, err)
			if r.ReadyAt.Equal(t0) && lane.PaceReservationAt(t0, &r).Equal(t0) && !r.pace {
				at++
			}
			rs = append(rs, r)
		}
		return at, rs
	}
	for _, c := range []struct {
		rpm, tpm float64
		share    float64
		want     int
	}{
		{rpm: 60000, tpm: 10e6, share: 1, want: 162},
		{rpm: 600, tpm: 1e6, share: 1, want: 10},
		{rpm: 600, tpm: 60000, share: 1, want: 1},
		{rpm: 60000, tpm: 10e6, share: 0.5, want: 1},
	} {
		lane, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: c.rpm, TPM: c.tpm, Concurrency: 512, Clock: clockwork.NewFakeClockAt(t0)})
		require.NoError(t, err)
		require.NoError(t, lane.SetShareAt(t0, c.share))
		got, _ := immediate(lane, c.want+1)
		require.Equal(t, c.want, got, "%v RPM, %v TPM, share %v", c.rpm, c.tpm, c.share)
	}

	lane, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 600, TPM: 1e6, Concurrency: 512, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	_, early := immediate(lane, 10)
	permits := make([]*Permit, len(early))
	for i, r := range early {
		permits[i] = lane.SendAt(t0, r)
	}
	h := RateLimitHeaders{LimitRequests: 600, HasLimitRequests: true, RemainingRequests: 590, HasRemainingRequests: true,
		LimitTokens: 1e6, HasLimitTokens: true, RemainingTokens: 1e6 - 1200, HasRemainingTokens: true}
	require.NoError(t, permits[0].DoneAt(sec(0.2), Outcome{Headers: h}))
	require.True(t, lane.trying)
	require.InDelta(t, 42, lane.trials[0].level, 1e-9)
}
