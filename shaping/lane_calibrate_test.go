package shaping

import (
	"context"
	"math"
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
// the send; the lane adds the refill since and takes off what it reserved
// that the server had not seen. The tokens its settlements found unused
// since the send count when it lowers the level (they may be back at the
// server), not when it raises it until the headers have shown that the
// provider gives them back (OpenAI does not).
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
	p2 := lane.SendAt(sec(2), r2)
	require.NoError(t, p1.DoneAt(sec(3), Outcome{PromptTokens: 100, CompletionTokens: 50, Headers: RateLimitHeaders{
		RemainingRequests: 50, HasRemainingRequests: true, RemainingTokens: 5000, HasRemainingTokens: true,
	}}))
	s := lane.SnapshotAt(sec(3))
	// RPM: 50 at the send, +2 refilled, -1 unseen (r2).
	require.InDelta(t, 51, s.Buckets[0].Level, 1e-9)
	// TPM: 5000 at the send, +200 refilled, -200 unseen, and the 50 the
	// settlement gave back may be back at the server: lowered to 5050.
	require.InDelta(t, 5050, s.Buckets[1].Level, 1e-9)

	// A newer header raises a level too: the server is full, and nothing
	// the lane reserved is unseen (r2 was sent).
	lane.ObserveAt(sec(3), RateLimitHeaders{RemainingRequests: 60, HasRemainingRequests: true, RemainingTokens: 6000, HasRemainingTokens: true})
	s = lane.SnapshotAt(sec(3))
	require.InDelta(t, 60, s.Buckets[0].Level, 1e-9)
	require.InDelta(t, 6000, s.Buckets[1].Level, 1e-9)

	// Once headers come, unused tokens come back as far as the headers show
	// the provider gives them back: the full bucket at 3 s counts the 50 of
	// p1 back (5000 + 200 refilled - 200 sent + 50), so all of them (the
	// sample says 2, the share is at most 1).
	require.Equal(t, []any{true, 1.0}, []any{lane.refundsKnown, lane.refundShare()})
	r3, err := lane.ReserveAt(sec(3), req)
	require.NoError(t, err)
	p3 := lane.SendAt(sec(3), r3)
	require.NoError(t, p3.DoneAt(sec(3), Outcome{PromptTokens: 100, CompletionTokens: 10}))
	require.InDelta(t, 5800+90, lane.SnapshotAt(sec(3)).Buckets[1].Level, 1e-9)

	// p2's answer is stale (the ObserveAt was newer): it lowers to 3000 +
	// 100 refilled + the 50 + 90 unused since its send (in case the
	// provider has them) - the 200 of r3, unseen.
	require.NoError(t, p2.DoneAt(sec(3), Outcome{Headers: RateLimitHeaders{RemainingTokens: 3000, HasRemainingTokens: true}}))
	require.InDelta(t, 3040, lane.SnapshotAt(sec(3)).Buckets[1].Level, 1e-9)
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

// levels returns the levels of a lane's buckets at now (rpm, tpm).
func levels(l *Lane, now time.Time) []float64 {
	var out []float64
	for _, b := range l.SnapshotAt(now).Buckets {
		out = append(out, b.Level)
	}
	return out
}

// remaining is a header with both remaining counts.
func remaining(req, tok float64) RateLimitHeaders {
	return RateLimitHeaders{RemainingRequests: req, HasRemainingRequests: true, RemainingTokens: tok, HasRemainingTokens: true}
}

// TestLaneHeadersRaise: the server's remaining headers raise a level as well
// as lower it, corrected for the refill since the send and for what the
// lane reserved that the server had not seen; a stale header (from a
// request sent before the newest applied) only lowers; a 429 never raises,
// and for a minute after it no header does.
func TestLaneHeadersRaise(t *testing.T) {
	t.Parallel()
	lane, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 60, TPM: 6000, WarmUp: -1, MinInterval: -1, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	req := Request{PromptTokens: 100, MaxOutputTokens: 100} // 200 tokens; refill 1 request and 100 tokens per second
	send := func(at float64) *Permit {
		r, err := lane.ReserveAt(sec(at), req)
		require.NoError(t, err)
		return lane.SendAt(sec(at), r)
	}
	p0, p1, p2 := send(0.5), send(1), send(2)
	_, err = lane.ReserveAt(sec(2), req) // queued: unseen by every answer below
	require.NoError(t, err)
	require.Equal(t, []float64{57.5, 5350}, levels(lane, sec(2)), "full, minus 4 requests, plus the refill")

	// p2's answer (the newest send) lowers: 3000 + 100 refilled - 200 unseen.
	require.NoError(t, p2.DoneAt(sec(3), Outcome{Headers: remaining(30, 3000)}))
	require.Equal(t, []float64{30, 2900}, levels(lane, sec(3)))
	// p1's answer is stale: it says more, and must not move the level back.
	require.NoError(t, p1.DoneAt(sec(3), Outcome{Headers: remaining(50, 5000)}))
	require.Equal(t, []float64{30, 2900}, levels(lane, sec(3)))
	// A stale header still lowers: 1000 + 250 refilled since 0.5 s - 600
	// unseen (p1, p2 and the queued one).
	require.NoError(t, p0.DoneAt(sec(3), Outcome{Headers: remaining(20, 1000)}))
	require.Equal(t, []float64{20 + 2.5 - 3, 1000 + 250 - 600}, levels(lane, sec(3)))

	// A newer answer raises, to what the server says less the unseen, with
	// the refill counted from 0.1 s after the send (the send skew: the
	// request may have reached the server that late).
	p3 := send(4)
	require.NoError(t, p3.DoneAt(sec(5), Outcome{Headers: remaining(40, 4000)}))
	require.Equal(t, []float64{40 + 0.9 - 1, 4000 + 90 - 200}, levels(lane, sec(5)))

	// A 429 never raises, even when its headers say more, and, unless a
	// short bucket explains it, no header raises for a minute after it;
	// one still lowers. Its headers say tokens remain: its own tokens
	// come back (the retry will take them again).
	p4 := send(5)
	require.NoError(t, p4.DoneAt(sec(5), Outcome{RateLimited: true, Headers: remaining(1, 6000)}))
	require.Equal(t, []float64{0, 3890}, levels(lane, sec(5)))
	p5 := send(6)
	require.NoError(t, p5.DoneAt(sec(6), Outcome{Headers: remaining(60, 6000)}))
	require.Equal(t, []float64{0, 3790}, levels(lane, sec(6)), "distrusted for a minute (the pause is over)")
	p6 := send(7)
	require.NoError(t, p6.DoneAt(sec(7), Outcome{Headers: remaining(30, 3000)}))
	require.Equal(t, []float64{0, 3000 - 200}, levels(lane, sec(7)), "lowering still works")
	p7 := send(65)
	require.Equal(t, []float64{57, 5800}, levels(lane, sec(65)))
	require.NoError(t, p7.DoneAt(sec(65), Outcome{Headers: remaining(59, 6000)}))
	require.Equal(t, []float64{59 - 1, 5800}, levels(lane, sec(65)), "a minute later, a raise again")
	require.Equal(t, ProviderMinute, lane.SnapshotAt(sec(65)).Provider, "p0's answer showed a deficit of 40 s of refill")
}

// TestLaneHeaderLiesThenRefused: a header that says the provider is full
// raises the level; the 429 that follows is believed over it. With honest
// headers (nothing remains) the level drops to them and the same lie does
// not raise it again for a minute: the lane runs on its own refill. Without
// headers, the lie is all the lane has heard, and a refusal while it showed
// room for twice the request is what a short bucket does: the lane caps its
// burst to a second of refill and paces every send.
func TestLaneHeaderLiesThenRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		refusal  RateLimitHeaders
		later    []float64 // levels after the lie again, 11 s later
		provider ProviderKind
	}{
		{"honest 429", remaining(0, 0), []float64{1 + 11, 100 + 1100}, ProviderUnknown},
		{"429 without headers", RateLimitHeaders{}, []float64{1, 100}, ProviderShort},
	} {
		lane, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 60, TPM: 6000, Start: StartEmpty, WarmUp: -1, MinInterval: -1, Clock: clockwork.NewFakeClockAt(t0)})
		require.NoError(t, err)
		lie := remaining(60, 6000)
		lane.ObserveAt(t0, lie)
		require.Equal(t, []float64{60, 6000}, levels(lane, t0), "believed")
		r, err := lane.ReserveAt(t0, Request{PromptTokens: 1000, MaxOutputTokens: 1000})
		require.NoError(t, err)
		p := lane.SendAt(t0, r)
		require.NoError(t, p.DoneAt(sec(1), Outcome{RateLimited: true, Headers: tc.refusal}))
		require.Equal(t, []float64{1, 100}, levels(lane, sec(1)), tc.name)
		lane.ObserveAt(sec(12), lie)
		require.Equal(t, tc.later, levels(lane, sec(12)), "%s: the lie no longer raises", tc.name)
		require.Equal(t, tc.provider, lane.SnapshotAt(sec(12)).Provider, tc.name)
	}
}

// TestLaneRaiseWakesAdmit: an Admit waiting for its reservation is woken
// by a header that raises the level, without the clock moving.
func TestLaneRaiseWakesAdmit(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(t0)
	lane, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 60, TPM: 6000, Start: StartEmpty, WarmUp: -1, MinInterval: -1, Clock: clock})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		p, err := lane.Admit(context.Background(), Request{PromptTokens: 100, MaxOutputTokens: 100})
		if err == nil {
			err = p.Done(Outcome{})
		}
		done <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "waiting 2 s for its tokens")
	lane.ObserveAt(t0, remaining(60, 6000))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("the raise did not wake Admit")
	}
	require.Equal(t, t0, clock.Now())
}

// TestLanePauseCapped: a 429's Retry-After pauses the lane at most
// MaxRetryAfter, even when it says hours or saturates time.Duration.
func TestLanePauseCapped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cap, retryAfter, want time.Duration
	}{
		{0, 3 * time.Second, 3 * time.Second},
		{0, 5 * time.Hour, 10 * time.Minute},
		{0, math.MaxInt64, 10 * time.Minute},
		{time.Minute, 5 * time.Hour, time.Minute},
	} {
		lane, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 60, MaxRetryAfter: tc.cap, Clock: clockwork.NewFakeClockAt(t0)})
		require.NoError(t, err)
		r, err := lane.ReserveAt(t0, Request{PromptTokens: 1, MaxOutputTokens: 1})
		require.NoError(t, err)
		require.NoError(t, lane.SendAt(t0, r).DoneAt(sec(1), Outcome{RateLimited: true, Headers: RateLimitHeaders{RetryAfter: tc.retryAfter, HasRetryAfter: true}}))
		require.Equal(t, sec(1).Add(tc.want), lane.PausedUntil(), "%+v", tc)
	}
}

// TestLaneLimitFromReset: without a limit header, remaining and reset give
// the limit (full again after (limit - remaining) / (limit/60s)); adaptive
// learns it, shape corrects a configured limit more than 5% off, and a
// reading with the bucket less than half full is ignored.
func TestLaneLimitFromReset(t *testing.T) {
	t.Parallel()
	h := RateLimitHeaders{RemainingTokens: 54000, HasRemainingTokens: true, ResetTokens: 6 * time.Second}
	adaptive, err := NewLane(LaneConfig{Strategy: StrategyAdaptive, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	adaptive.ObserveAt(t0, h)
	require.Equal(t, []BucketSnapshot{{Name: "tpm", Level: 54000, Capacity: 60000, Limit: 60000}}, adaptive.SnapshotAt(t0).Buckets)

	shape := func(tpm float64) *Lane {
		l, err := NewLane(LaneConfig{Strategy: StrategyShape, TPM: tpm, WarmUp: -1, Clock: clockwork.NewFakeClockAt(t0)})
		require.NoError(t, err)
		return l
	}
	for _, tc := range []struct {
		tpm  float64
		h    RateLimitHeaders
		want float64
	}{
		{120000, h, 60000},
		{62000, h, 62000}, // within 5%: the header's rounding
		{120000, RateLimitHeaders{RemainingTokens: 20000, HasRemainingTokens: true, ResetTokens: 40 * time.Second}, 120000},
		{120000, RateLimitHeaders{RemainingTokens: 20000, HasRemainingTokens: true}, 120000},
		{120000, RateLimitHeaders{LimitTokens: 90000, HasLimitTokens: true, RemainingTokens: 54000, HasRemainingTokens: true, ResetTokens: 6 * time.Second}, 90000},
	} {
		l := shape(tc.tpm)
		l.ObserveAt(t0, tc.h)
		require.InDelta(t, tc.want, l.SnapshotAt(t0).Buckets[0].Limit, 1e-6, "%+v", tc)
	}
	// Once a limit header has come, the reading no longer counts.
	l := shape(120000)
	l.ObserveAt(t0, RateLimitHeaders{LimitTokens: 120000, HasLimitTokens: true})
	l.ObserveAt(t0, h)
	require.Equal(t, 120000.0, l.SnapshotAt(t0).Buckets[0].Limit)
}

// TestLaneRefundsMeasured: the headers show whether the provider gives back
// the tokens a settlement finds unused: between two fresh readings its
// remaining is the first, plus the refill, less what the lane sent, plus
// what came back. The lane gives back to its TPM bucket only that share;
// before a measure, none, on a short bucket too (crediting them, the lanes
// of a fleet on a short bucket that keeps them were refused).
func TestLaneRefundsMeasured(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		second   float64 // remaining in the second answer
		known    bool
		refunds  float64
		giveBack float64 // of r3's 500 unused
	}{
		{"gives back", 50800, true, 1, 500},
		{"keeps", 50000, true, 0, 0},
		{"half", 50400, true, 0.5, 250},
		// A tenth is below refundsFloor: noise, none comes back.
		{"a tenth", 50080, true, 0.1, 0},
	} {
		lane, err := NewLane(LaneConfig{Strategy: StrategyShape, TPM: 60000, WarmUp: -1, Clock: clockwork.NewFakeClockAt(t0)})
		require.NoError(t, err)
		r1, err := lane.ReserveAt(t0, Request{PromptTokens: 9000, MaxOutputTokens: 1000})
		require.NoError(t, err)
		p1 := lane.SendAt(t0, r1)
		require.NoError(t, p1.DoneAt(sec(1), Outcome{PromptTokens: 9000, CompletionTokens: 200, Headers: RateLimitHeaders{RemainingTokens: 50000, HasRemainingTokens: true}}))
		require.False(t, lane.refundsKnown, "one reading")
		r2, err := lane.ReserveAt(sec(1), Request{PromptTokens: 500, MaxOutputTokens: 500})
		require.NoError(t, err)
		p2 := lane.SendAt(sec(1), r2)
		// 50000 + 1000 refilled - the 1000 of p2 (+ the 800 p1 left unused,
		// when they come back).
		require.NoError(t, p2.DoneAt(sec(2), Outcome{Headers: RateLimitHeaders{RemainingTokens: tc.second, HasRemainingTokens: true}}))
		require.Equal(t, []any{tc.known, tc.refunds}, []any{lane.refundsKnown, lane.refunds}, tc.name)
		before := levels(lane, sec(2))[0]
		r3, err := lane.ReserveAt(sec(2), Request{PromptTokens: 500, MaxOutputTokens: 500})
		require.NoError(t, err)
		require.NoError(t, lane.SendAt(sec(2), r3).DoneAt(sec(2), Outcome{PromptTokens: 500, CompletionTokens: 0}))
		require.InDelta(t, before-1000+tc.giveBack, levels(lane, sec(2))[0], 1e-9, tc.name)
	}

	// A reading from a bucket that may have filled in between is no
	// measure: the remaining then says nothing of what came back.
	lane, err := NewLane(LaneConfig{Strategy: StrategyShape, TPM: 60000, WarmUp: -1, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	r1, err := lane.ReserveAt(t0, Request{PromptTokens: 500, MaxOutputTokens: 500})
	require.NoError(t, err)
	require.NoError(t, lane.SendAt(t0, r1).DoneAt(sec(1), Outcome{PromptTokens: 500, CompletionTokens: 100, Headers: RateLimitHeaders{RemainingTokens: 59000, HasRemainingTokens: true}}))
	r2, err := lane.ReserveAt(sec(1), Request{PromptTokens: 500, MaxOutputTokens: 500})
	require.NoError(t, err)
	require.NoError(t, lane.SendAt(sec(1), r2).DoneAt(sec(2), Outcome{Headers: RateLimitHeaders{RemainingTokens: 59000, HasRemainingTokens: true}}))
	require.False(t, lane.refundsKnown, "59000 + 1000 refilled: the bucket may have been full")
	require.Equal(t, 0.0, lane.refundShare(), "a minute bucket: none before a measure")
	lane.setKindLocked(ProviderShort)
	require.Equal(t, 0.0, lane.refundShare(), "a short bucket: none before a measure")
}

// TestLaneRefundsReordered: a request sent within SendSkew after another
// (at the same instant included) may reach the server before it, and the first one's header then counts
// it. Between that reading and the next, the lane would see fewer tokens
// spent than it sent, which reads as unused tokens given back by a
// provider that keeps them: no sample is taken until the unused tokens
// outweigh such requests tenfold. A request sent after the skew is no
// doubt: the same readings measure that nothing comes back.
func TestLaneRefundsReordered(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		second float64 // p2's send, seconds after p1's
		first  float64 // p1's remaining: p2 counted when it came first
		known  bool
	}{
		{"p2 reached the server first", 0.01, 49000, false},
		// A burst leaves at one instant, in any order at the server.
		{"p2 sent at p1's instant, reached the server first", 0, 49000, false},
		{"p2 sent after the skew", 0.2, 50000, true},
	} {
		lane, err := NewLane(LaneConfig{Strategy: StrategyShape, TPM: 60000, WarmUp: -1, MinInterval: -1, Clock: clockwork.NewFakeClockAt(t0)})
		require.NoError(t, err)
		send := func(at float64, tokens int) *Permit {
			r, err := lane.ReserveAt(sec(at), Request{PromptTokens: tokens - 1000, MaxOutputTokens: 1000})
			require.NoError(t, err)
			return lane.SendAt(sec(at), r)
		}
		p1, p2 := send(0, 10000), send(tc.second, 1000)
		require.NoError(t, p1.DoneAt(sec(1), Outcome{PromptTokens: 9000, CompletionTokens: 200, Headers: RateLimitHeaders{RemainingTokens: tc.first, HasRemainingTokens: true}}))
		require.NoError(t, p2.DoneAt(sec(1), Outcome{PromptTokens: 0, CompletionTokens: 1000}))
		// The server kept p1's 800 unused: 60000 - 10000 - 1000 + 2000
		// refilled - p3's 1000.
		p3 := send(2, 1000)
		require.NoError(t, p3.DoneAt(sec(3), Outcome{Headers: RateLimitHeaders{RemainingTokens: 50000, HasRemainingTokens: true}}))
		require.Equal(t, tc.known, lane.refundsKnown, tc.name)
		require.Equal(t, 0.0, lane.refundShare(), tc.name)
	}
}

// TestLaneRefundsAverage: samples are averaged as measured, and only the
// average is held to [0, 1]: the readings' timing errors fall either way,
// and a sample clamped at 0 would turn them into tokens given back. A
// provider that keeps its tokens reads -1 then 0.6 here: -0.2, none.
func TestLaneRefundsAverage(t *testing.T) {
	t.Parallel()
	lane, err := NewLane(LaneConfig{Strategy: StrategyShape, TPM: 60000, WarmUp: -1, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	lane.refundsLocked(reading{ok: true, at: sec(0), remaining: 30000})
	// 30000 + 1000 refilled - 1000 sent, 1000 unused: 29000 is -1.
	lane.refundsLocked(reading{ok: true, at: sec(1), remaining: 29000, m: marks{tok: 1000, ref: 1000}})
	require.Equal(t, []any{true, -1.0}, []any{lane.refundsKnown, lane.refunds})
	// 29000 + 1000 - 1000 sent, 1000 unused: 29600 is 0.6.
	lane.refundsLocked(reading{ok: true, at: sec(2), remaining: 29600, m: marks{tok: 2000, ref: 2000}})
	require.InDelta(t, -0.2, lane.refunds, 1e-9)
	require.Equal(t, 0.0, lane.refundShare())
}

// TestLaneSendSkew: each send remembers the tokens sent within SendSkew
// before it (not at its start: a send at exactly from is older), from a
// ring of the newest sendRing sends.
func TestLaneSendSkew(t *testing.T) {
	t.Parallel()
	lane, err := NewLane(LaneConfig{Strategy: StrategyShape, TPM: 1e9, WarmUp: -1, MinInterval: -1, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	send := func(at float64, tokens int) float64 {
		r, err := lane.ReserveAt(sec(at), Request{PromptTokens: tokens - 1, MaxOutputTokens: 1})
		require.NoError(t, err)
		return lane.SendAt(sec(at), r).rec.skewTok
	}
	require.Equal(t, 0.0, send(0, 100))
	require.Equal(t, 100.0, send(0.0625, 200))
	require.Equal(t, 0.0, send(0.1625, 300), "the send at 0.0625 is exactly SendSkew old")
	require.Equal(t, 300.0, send(0.17, 400))
	require.Equal(t, 700.0, send(0.17, 500), "a send at the same instant counts")
	for range 3*sendRing + 7 {
		send(1, 1)
	}
	require.Equal(t, float64(sendRing), send(1, 1), "only the newest sendRing sends")
	off, err := NewLane(LaneConfig{Strategy: StrategyShape, TPM: 1e9, WarmUp: -1, MinInterval: -1, SendSkew: -1, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	lane = off
	send(0, 100)
	require.Equal(t, 0.0, send(0.01, 100), "SendSkew -1")
}

// TestLevelLockedRaiseBound: the level a header may raise a bucket to is
// the lane's share of what the server says is back (remaining, plus the
// refill since the send, plus the unused tokens it gives back as far as
// the provider is known to refund), less the part of the limit the lane
// does not trust (limit − burst), less what the lane reserved that the
// server had not seen.
func TestLevelLockedRaiseBound(t *testing.T) {
	t.Parallel()
	lane, err := NewLane(LaneConfig{Strategy: StrategyShape, TPM: 60000, WarmUp: -1, MinInterval: -1,
		Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	b, err := NewBucket(BucketConfig{Name: "tpm", Limit: 60000, Start: StartEmpty}, t0)
	require.NoError(t, err)
	lane.refundsKnown, lane.refunds = true, 0.5
	v := &view{limit: 60000, burst: 50000}
	// The header was sent 1 s ago: 20,000 remained then, 1,000 came back
	// since; 4,000 unused tokens were settled, half of them given back;
	// 3,000 reserved are not yet seen by the server, and 500 sent just before
	// the header's request may not have been either.
	at := t0.Add(-time.Second)
	// The refill counts from 0.1 s after the send (the send skew).
	require.True(t, lane.levelLocked(t0, at, b, v, 20000, 4000, 3000, 0, 500, 0, true))
	require.InDelta(t, 20000+900+2000-(60000-50000)-3000-500, b.LevelAt(t0), 1e-9)
}

// TestLaneSettlesPromptEstimate: once the provider sends headers, a
// settlement gives the lane's TPM bucket back the tokens its prompt
// estimate took over the provider's count whatever the provider does with
// unused output (it charges the prompt it counts), and of the unused
// output only the share the headers show coming back: none before a
// measure, on a short bucket too.
func TestLaneSettlesPromptEstimate(t *testing.T) {
	t.Parallel()
	lane, err := NewLane(LaneConfig{Strategy: StrategyShape, TPM: 60000, WarmUp: -1, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	lane.ObserveAt(t0, RateLimitHeaders{RemainingTokens: 60000, HasRemainingTokens: true})
	lane.mu.Lock()
	lane.setKindLocked(ProviderShort)
	lane.mu.Unlock()
	r, err := lane.ReserveAt(t0, Request{PromptTokens: 1000, MaxOutputTokens: 500})
	require.NoError(t, err)
	before := lane.tpm.LevelAt(t0)
	p := lane.SendAt(t0, r)
	require.NoError(t, p.DoneAt(t0, Outcome{PromptTokens: 800, CompletionTokens: 100}))
	require.InDelta(t, 200, lane.tpm.LevelAt(t0)-before, 1e-9, "the prompt's 200, not the output's 400")
}
