package shaping

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

// TestLaneTrial: after the first answer with headers, a lane of unknown
// kind sends unpaced what its trials hold (5 s of requests, 50 at 600 RPM,
// and a second of tokens), then one canary past the requests' trial, and
// paces the rest (the canary takes a pacing slot). Its admission doubles the
// trials; a second admission makes them hold more than twice ShortBucket
// of requests: a minute bucket, and what remains goes at once. A refused
// canary, with room in the headers, shows a short bucket.
func TestLaneTrial(t *testing.T) {
	t.Parallel()
	newLane := func() (*Lane, *Permit) {
		lane, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 600, TPM: 1e6, Concurrency: 512, Clock: clockwork.NewFakeClockAt(t0)})
		require.NoError(t, err)
		r, err := lane.ReserveAt(t0, Request{PromptTokens: 20, MaxOutputTokens: 100})
		require.NoError(t, err)
		return lane, lane.SendAt(t0, r)
	}
	h := func(remReq float64) RateLimitHeaders {
		return RateLimitHeaders{LimitRequests: 600, HasLimitRequests: true, RemainingRequests: remReq, HasRemainingRequests: true,
			LimitTokens: 1e6, HasLimitTokens: true, RemainingTokens: 1e6 - 120*(600-remReq), HasRemainingTokens: true}
	}
	// burst reserves n at now and reports how each goes: unpaced, the
	// canary, or paced (with its time).
	burst := func(lane *Lane, now time.Time, n int) (unpaced int, canaries []*Permit, paced []time.Time) {
		for range n {
			r, err := lane.ReserveAt(now, Request{PromptTokens: 20, MaxOutputTokens: 100})
			require.NoError(t, err)
			at := lane.PaceReservationAt(now, &r)
			switch {
			case r.canary:
				canaries = append(canaries, lane.SendAt(now, r))
			case r.pace:
				paced = append(paced, at)
			default:
				unpaced++
			}
		}
		return unpaced, canaries, paced
	}

	lane, probe := newLane()
	require.NoError(t, probe.DoneAt(sec(0.2), Outcome{Headers: h(599)}))
	require.True(t, lane.trying)
	unpaced, canaries, paced := burst(lane, sec(0.2), 53)
	require.Equal(t, 50, unpaced)
	require.Len(t, canaries, 1)
	require.Equal(t, []time.Time{sec(0.3), sec(0.4)}, paced, "after the canary's slot")
	n, trying := lane.trialRoomLocked(sec(0.2), sec(1.2), 120)
	require.Equal(t, []any{7, true}, []any{n, trying}, "-3 and 10 refilled in a second, no canary while one is out")
	require.Equal(t, 7+8, lane.HeadroomAt(sec(0.2), time.Second, Request{PromptTokens: 20, MaxOutputTokens: 100}),
		"and the paced sends from 0.5 s to 1.2 s")

	require.NoError(t, canaries[0].DoneAt(sec(0.4), Outcome{Headers: h(548)}))
	require.Equal(t, ProviderUnknown, lane.SnapshotAt(sec(0.4)).Provider)
	require.InDelta(t, 100, lane.trials[0].capacity, 1e-9)
	unpaced, canaries, _ = burst(lane, sec(0.4), 50)
	require.Equal(t, 49, unpaced, "-3 + 2 refilled + 50 doubled")
	require.Len(t, canaries, 1)
	require.NoError(t, canaries[0].DoneAt(sec(0.6), Outcome{Headers: h(500)}))
	require.Equal(t, ProviderMinute, lane.SnapshotAt(sec(0.6)).Provider)
	require.False(t, lane.trying)
	unpaced, canaries, _ = burst(lane, sec(0.6), 100)
	require.Equal(t, []any{100, 0}, []any{unpaced, len(canaries)}, "a minute bucket: all at once")

	// A request that waits for a bucket (its tenant's quota) is no
	// canary: it would hold the next one back as long.
	lane, probe = newLane()
	require.NoError(t, probe.DoneAt(sec(0.2), Outcome{Headers: h(599)}))
	unpaced, canaries, _ = burst(lane, sec(0.2), 50)
	require.Equal(t, []any{50, 0}, []any{unpaced, len(canaries)})
	tenant, err := NewBucket(BucketConfig{Name: "tenant", Limit: 60, Start: StartEmpty}, sec(0.2))
	require.NoError(t, err)
	r, err := lane.ReserveAt(sec(0.2), Request{PromptTokens: 20, MaxOutputTokens: 100, Quotas: []Quota{{Bucket: tenant}}})
	require.NoError(t, err)
	require.Equal(t, []any{false, true}, []any{r.canary, r.pace})
	_, canaries, _ = burst(lane, sec(0.2), 1)
	require.Len(t, canaries, 1)

	lane, probe = newLane()
	require.NoError(t, probe.DoneAt(sec(0.2), Outcome{Headers: h(599)}))
	_, canaries, _ = burst(lane, sec(0.2), 51)
	require.Len(t, canaries, 1)
	require.NoError(t, canaries[0].DoneAt(sec(0.25), Outcome{RateLimited: true, Headers: h(549)}))
	require.Equal(t, ProviderShort, lane.SnapshotAt(sec(0.25)).Provider)
	require.False(t, lane.trying)
}

// roomJob is a short question: 20 prompt tokens, 100 out.
func roomJob(*rand.Rand) *simJob { return &simJob{prompt: 20, maxOut: 100, out: 100} }

// runRoom runs 180 short questions landing at once on an idle provider of
// 600 RPM and 1M TPM whose quota holds them all (a bucket of one minute, or
// of short of refill), through a serial dispatcher as the worker admits,
// with slots for all of them.
func runRoom(t *testing.T, short time.Duration, seed uint64) (span time.Duration, calls, limited int, kind ProviderKind) {
	t.Helper()
	const rpm, tpm = 600.0, 1e6
	res, err := runSim(simConfig{
		lane:    LaneConfig{Name: "room", RPM: rpm, TPM: tpm, Concurrency: 512},
		up:      upstreamConfig{RPM: rpm, TPM: tpm, Headers: true, TTFT: 100 * time.Millisecond, PerToken: time.Millisecond, Short: short, RetryAfterSeconds: true},
		workers: 512, serial: true, backlog: 180, job: roomJob, duration: time.Hour, seed: seed, transit: 20 * time.Millisecond,
	})
	require.NoError(t, err)
	require.Equal(t, 180, res.completed)
	return res.end.Sub(res.start), res.up.ok + res.up.limited, res.up.limited, res.lane.Snapshot().Provider
}

// TestLaneTrialRoom: a burst the quota holds goes at once where the
// provider takes it at once. On a minute bucket the lane tries the
// provider with ShortBucket of requests, then a canary past it, which is
// admitted twice: within three calls of the first answer it knows the
// minute and sends the rest, 180 calls in about four round trips, no 429
// (paced at the RPM they took 18 s). On a short bucket of 5 s the canary
// is refused, once: the lane learns the short bucket from it and goes on
// at its refill.
func TestLaneTrialRoom(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{1, 2, 3} {
		span, calls, limited, kind := runRoom(t, 0, seed)
		t.Logf("minute seed %d: span %v, %d calls, %d answered 429, provider %s", seed, span, calls, limited, kind)
		require.Equal(t, 0, limited)
		require.Equal(t, ProviderMinute, kind)
		require.Less(t, span, 1500*time.Millisecond)

		span, calls, limited, kind = runRoom(t, 5*time.Second, seed)
		t.Logf("short seed %d: span %v, %d calls, %d answered 429, provider %s", seed, span, calls, limited, kind)
		require.LessOrEqual(t, limited, 1)
		require.Equal(t, ProviderShort, kind)
		// 50 at once, then 130 at 10 per second.
		require.Less(t, span, 15*time.Second)
	}
}

// runRoomMix is runRoom with llmq demo's mix at its quota (600 RPM, 150k
// TPM): one job in four a document of about 1,500 tokens charged, the
// others about 120, 180 of them (about 80k tokens): the quota holds them
// all, but a second of tokens holds two documents.
func runRoomMix(t *testing.T, short time.Duration, seed uint64) (span time.Duration, limited int, kind ProviderKind) {
	t.Helper()
	const rpm, tpm = 600.0, 150e3
	n := 0
	job := func(*rand.Rand) *simJob {
		n++
		if n%4 == 0 {
			return &simJob{prompt: 1000, maxOut: 500, out: 500}
		}
		return roomJob(nil)
	}
	res, err := runSim(simConfig{
		lane:    LaneConfig{Name: "room-mix", RPM: rpm, TPM: tpm, Concurrency: 512},
		up:      upstreamConfig{RPM: rpm, TPM: tpm, Headers: true, TTFT: 100 * time.Millisecond, PerToken: time.Millisecond, Short: short, RetryAfterSeconds: true},
		workers: 512, serial: true, backlog: 180, job: job, duration: time.Hour, seed: seed, transit: 20 * time.Millisecond,
	})
	require.NoError(t, err)
	require.Equal(t, 180, res.completed)
	return res.end.Sub(res.start), res.up.limited, res.lane.Snapshot().Provider
}

// TestLaneTrialRoomTokens: when the tokens' trial (ShortBucket of refill)
// is what holds a burst back, the canary goes past it: its admissions
// double it, and once it holds more than twice ShortBucket the provider
// enforces per minute: 2.1 s (2.5 s when the tokens' trial started at a
// second of refill, one canary round trip more). Before, the canary had to
// fit the tokens' trial, which the paced sends kept empty: the 180 jobs
// went at the RPM interval, 11.7 s. On a short bucket the canary past its
// tokens is refused, once.
func TestLaneTrialRoomTokens(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{1, 2} {
		span, limited, kind := runRoomMix(t, 0, seed)
		t.Logf("minute seed %d: span %v, %d answered 429, provider %s", seed, span, limited, kind)
		require.Equal(t, 0, limited)
		require.Equal(t, ProviderMinute, kind)
		require.Less(t, span, 1900*time.Millisecond)

		span, limited, kind = runRoomMix(t, 5*time.Second, seed)
		t.Logf("short seed %d: span %v, %d answered 429, provider %s", seed, span, limited, kind)
		require.LessOrEqual(t, limited, 1)
		require.Equal(t, ProviderShort, kind)
	}
}

// TestLaneTrialLimitsFromHeaders: a lane whose headers state its quota
// (adaptive, none configured) sizes its trials by them, ShortBucket of
// refill each, and a burst they hold goes unpaced. Started before the
// headers created its buckets, the trials held nothing: every send was a
// canary or paced, two calls out at a time, so a gateway lane never had
// more out than a provider of four calls at a time takes, and never
// learned it (BenchmarkGatewayPrediction's burst arm).
func TestLaneTrialLimitsFromHeaders(t *testing.T) {
	t.Parallel()
	lane, err := NewLane(LaneConfig{Strategy: StrategyAdaptive, Concurrency: 64, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	r, err := lane.ReserveAt(t0, Request{PromptTokens: 20, MaxOutputTokens: 100})
	require.NoError(t, err)
	require.NoError(t, lane.SendAt(t0, r).DoneAt(sec(0.2), Outcome{PromptTokens: 20, CompletionTokens: 100, Headers: headers600(599, 59880)}))
	require.True(t, lane.trying)
	require.InDeltaSlice(t, []float64{50, 5000}, []float64{lane.trials[0].capacity, lane.trials[1].capacity}, 1e-9)
	for range 16 {
		r, err := lane.ReserveAt(sec(0.2), Request{PromptTokens: 20, MaxOutputTokens: 100})
		require.NoError(t, err)
		lane.PaceReservationAt(sec(0.2), &r)
		require.Equal(t, []bool{false, false}, []bool{r.pace, r.canary})
	}
}

// TestLaneCanaryAfter: while the lane tries the provider, it counts the
// requests like one that it would send up to its canary (that one
// included) and tells whether the canary goes past the requests' trial
// (50 at 600 RPM) or past the tokens' alone (a second of refill here);
// none while a canary flies, none before the first answer. It reserves
// nothing.
func TestLaneCanaryAfter(t *testing.T) {
	t.Parallel()
	question, document := Request{PromptTokens: 20, MaxOutputTokens: 100}, Request{PromptTokens: 1000, MaxOutputTokens: 500}
	newLane := func(tpm float64) *Lane {
		lane, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 600, TPM: tpm, Concurrency: 512, Clock: clockwork.NewFakeClockAt(t0)})
		require.NoError(t, err)
		n, _ := lane.CanaryAfter(t0, question)
		require.Zero(t, n, "before the first answer: the probe")
		r, err := lane.ReserveAt(t0, question)
		require.NoError(t, err)
		require.NoError(t, lane.SendAt(t0, r).DoneAt(sec(0.2), Outcome{Headers: RateLimitHeaders{
			LimitRequests: 600, HasLimitRequests: true, RemainingRequests: 599, HasRemainingRequests: true,
			LimitTokens: tpm, HasLimitTokens: true, RemainingTokens: tpm - 120, HasRemainingTokens: true}}))
		require.True(t, lane.trying)
		return lane
	}
	after := func(lane *Lane, req Request) []any {
		n, past := lane.CanaryAfter(sec(0.2), req)
		return []any{n, past}
	}
	lane := newLane(1e6)
	require.Equal(t, []any{51, true}, after(lane, question), "50 questions fill the requests' trial")

	lane = newLane(6000)
	require.InDeltaSlice(t, []float64{50, 500}, []float64{lane.trials[0].capacity, lane.trials[1].capacity}, 1e-9)
	require.Equal(t, []any{1, false}, after(lane, document), "past the tokens' trial alone")
	require.Equal(t, []any{5, false}, after(lane, question), "four questions fill the tokens' trial")
	require.Equal(t, []any{5, false}, after(lane, question), "CanaryAfter reserved nothing")
	for range 4 {
		r, err := lane.ReserveAt(sec(0.2), question)
		require.NoError(t, err)
		require.Equal(t, []bool{false, false}, []bool{r.canary, r.pace})
		lane.SendAt(sec(0.2), r)
	}
	require.Equal(t, []any{1, false}, after(lane, question))
	r, err := lane.ReserveAt(sec(0.2), question)
	require.NoError(t, err)
	require.True(t, r.canary)
	require.Equal(t, []any{0, false}, after(lane, document), "a canary flies")
	lane.SendAt(sec(0.2), r).Cancel()
	require.Equal(t, []any{1, false}, after(lane, document), "the canary that never went is no longer out")
}

// TestLanePacedWakesOnCanary: a send paced while the lane tries the
// provider (past the trials, a canary out) goes when that canary's
// admission doubles the trials and they cover it, not at its pacing slot
// a tenth of a second later; the slot goes back to the next send.
func TestLanePacedWakesOnCanary(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(t0)
	lane, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 600, TPM: 1e6, Concurrency: 512, Clock: clock})
	require.NoError(t, err)
	question := Request{PromptTokens: 20, MaxOutputTokens: 100}
	h := func(remReq float64) RateLimitHeaders {
		return RateLimitHeaders{LimitRequests: 600, HasLimitRequests: true, RemainingRequests: remReq, HasRemainingRequests: true,
			LimitTokens: 1e6, HasLimitTokens: true, RemainingTokens: 1e6 - 120*(600-remReq), HasRemainingTokens: true}
	}
	r, err := lane.ReserveAt(t0, question)
	require.NoError(t, err)
	require.NoError(t, lane.SendAt(t0, r).DoneAt(sec(0.2), Outcome{Headers: h(599)}))
	clock.Advance(200 * time.Millisecond)
	var canary *Permit
	for range 51 {
		r, err := lane.ReserveAt(sec(0.2), question)
		require.NoError(t, err)
		require.Equal(t, sec(0.2), lane.PaceReservationAt(sec(0.2), &r))
		p := lane.SendAt(sec(0.2), r)
		if r.canary {
			canary = p
		}
	}
	require.NotNil(t, canary)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sent := make(chan time.Time, 1)
	go func() {
		p, err := lane.Admit(ctx, question)
		if err == nil {
			p.Cancel()
		}
		sent <- clock.Now()
	}()
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the send waits for its pacing slot at 0.3 s")
	require.NoError(t, canary.DoneAt(sec(0.2), Outcome{Headers: h(548)}))
	select {
	case at := <-sent:
		require.Equal(t, sec(0.2), at, "sent when the canary was admitted")
	case <-ctx.Done():
		t.Fatal("the paced send did not go when the trials covered it")
	}
	r, err = lane.ReserveAt(sec(0.2), question)
	require.NoError(t, err)
	require.False(t, r.pace, "the doubled trials hold it")
}
