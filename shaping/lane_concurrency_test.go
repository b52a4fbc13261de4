package shaping

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

// gatewayWorkload is the gateway bench's: 11 agents of 20 sequential calls
// (prompts of ~20 tokens, max output 200, answers of 50-200 tokens) on a
// provider of 60 RPM, 20k TPM and 4 calls at a time that states its
// requests and tokens in headers but not its calls at a time.
func gatewayWorkload(strategy Strategy, rpm, tpm float64, concurrency int) simConfig {
	return simConfig{
		lane: LaneConfig{Name: "gateway", Strategy: strategy, RPM: rpm, TPM: tpm, Concurrency: concurrency},
		up: upstreamConfig{RPM: 60, TPM: 20_000, Headers: true, TTFT: 200 * time.Millisecond,
			PerToken: 10 * time.Millisecond, RetryAfterSeconds: true, MaxConcurrency: 4},
		workers: 11, backlog: 220, duration: 10 * time.Minute, seed: 5,
		job: func(rng *rand.Rand) *simJob {
			return &simJob{prompt: 20, maxOut: 200, out: 50 + rng.IntN(151)}
		},
	}
}

// TestSimulationLearnsConcurrency: on the gateway workload, a lane that
// knows nothing of the provider (adaptive, as llmq runs a model without a
// quota) and one that knows its quotas but not its calls at a time learn
// the latter from the provider's concurrency 429s: every call succeeds,
// those 429s stay within 1% of the calls, and the lane ends at most one
// over the provider's 4; configured, the lane meets none.
func TestSimulationLearnsConcurrency(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		strategy Strategy
		rpm, tpm float64
		conc     int
		most     int
	}{
		{"adaptive, nothing configured", StrategyAdaptive, 0, 0, 0, 2},
		{"shape, quotas without concurrency", StrategyShape, 60, 20_000, 0, 2},
		{"shape, all configured", StrategyShape, 60, 20_000, 4, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, err := runSim(gatewayWorkload(tc.strategy, tc.rpm, tc.tpm, tc.conc))
			require.NoError(t, err)
			snap := res.lane.Snapshot()
			t.Logf("completed %d in %s, 429s %d (concurrency %d), concurrency limit %d, provider %s",
				res.completed, res.end.Sub(res.start), res.up.limited, res.up.limitedConcurrency,
				snap.ConcurrencyLimit, snap.Provider)
			require.Equal(t, 220, res.completed)
			require.LessOrEqual(t, res.up.limitedConcurrency, tc.most)
			// Its calls out count an answer on its way: the cap may stay
			// one above the provider's.
			require.LessOrEqual(t, snap.ConcurrencyLimit, 5)
		})
	}
}

// sendN sends n requests on l at now, each holding a slot, and returns
// their permits.
func sendN(t *testing.T, l *Lane, now time.Time, n int) []*Permit {
	t.Helper()
	var ps []*Permit
	for range n {
		r, err := l.ReserveAt(now, Request{PromptTokens: 10, MaxOutputTokens: 10})
		require.NoError(t, err)
		require.True(t, l.TryAcquireSlot())
		ps = append(ps, l.SendAt(now, r))
	}
	return ps
}

// busyHeaders are a 429's for the provider's calls at a time: requests and
// tokens remain.
func busyHeaders(concurrency bool) RateLimitHeaders {
	return RateLimitHeaders{LimitRequests: 600, LimitTokens: 1e6, RemainingRequests: 500, RemainingTokens: 9e5,
		HasLimitRequests: true, HasLimitTokens: true, HasRemainingRequests: true, HasRemainingTokens: true,
		RetryAfter: time.Second, HasRetryAfter: true, Concurrency: concurrency}
}

// TestLaneLearnsConcurrency: the 429s of a burst that name the provider's
// calls at a time cut the lane's concurrency to the calls the provider
// held (one below the calls out, one lower per refusal), without pausing
// the lane or taking the provider for a short bucket; answers at the cap
// raise it by one per concIncreaseEvery. A refusal that names no
// concurrency is a short bucket's, as before.
func TestLaneLearnsConcurrency(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	newLane := func() *Lane {
		l, err := NewLane(LaneConfig{Name: "c", Strategy: StrategyShape, RPM: 600, TPM: 1e6, Concurrency: 16,
			ColdStart: ColdStartStatic, WarmUp: -1, Start: StartFull, MinInterval: -1, Clock: clockwork.NewFakeClockAt(t0)})
		require.NoError(t, err)
		return l
	}
	l := newLane()
	ps := sendN(t, l, t0, 7)
	at := t0.Add(100 * time.Millisecond)
	// The provider took the first four and refused the last three.
	for i, want := range []int{6, 5, 4} {
		require.NoError(t, ps[6-i].DoneAt(at, Outcome{RateLimited: true, Headers: busyHeaders(true)}))
		require.Equal(t, want, l.Snapshot().ConcurrencyLimit, "after refusal %d", i+1)
	}
	require.True(t, l.PausedUntil().IsZero(), "no pause")
	require.NotEqual(t, ProviderShort, l.Snapshot().Provider)
	for _, p := range ps[:4] {
		require.NoError(t, p.DoneAt(at, Outcome{PromptTokens: 10, CompletionTokens: 10}))
	}

	// The cap grows by one after concIncreaseEvery answers sent at it (the
	// burst's fourth, sent with four slots held, was the first; then one
	// in each round of four).
	now := at
	for i := range concIncreaseEvery - 1 {
		require.Equal(t, 4, l.Snapshot().ConcurrencyLimit, "answer %d", i)
		for _, p := range sendN(t, l, now, 4) {
			now = now.Add(time.Millisecond)
			require.NoError(t, p.DoneAt(now, Outcome{PromptTokens: 10, CompletionTokens: 10}))
		}
	}
	require.Equal(t, 5, l.Snapshot().ConcurrencyLimit)

	// A refusal with room that names no concurrency: a short bucket.
	l = newLane()
	ps = sendN(t, l, t0, 7)
	require.NoError(t, ps[6].DoneAt(at, Outcome{RateLimited: true, Headers: busyHeaders(false)}))
	require.Equal(t, 16, l.Snapshot().ConcurrencyLimit)
	require.Equal(t, ProviderShort, l.Snapshot().Provider)
	require.False(t, l.PausedUntil().IsZero())
}

func TestConcurrencyMessage(t *testing.T) {
	t.Parallel()
	for msg, want := range map[string]bool{
		"Rate limit reached for gpt-4o-mini in organization org-x on concurrent requests: Limit 4, Used 4, Requested 1.": true,
		"Too many concurrent requests": true,
		"Concurrency limit exceeded":   true,
		"Rate limit reached for gpt-4o-mini in organization org-x on requests per min (RPM): Limit 3, Used 3, Requested 1.":            false,
		"Rate limit reached for gpt-4o-mini in organization org-x on tokens per min (TPM): Limit 200000, Used 195869, Requested 4412.": false,
	} {
		require.Equal(t, want, ConcurrencyMessage(msg), msg)
	}
}

// TestAdmitByWaitsForAProviderSlotUntilBy: on a lane whose slots the
// provider's calls at a time cap (learned from its refusals), a request
// with somewhere else to go (AdmitBy) waits for a slot until by, then gets
// a *WaitError whose Deadline is by: other clients hold the provider's
// calls, as a pause would hold them. On a lane whose own calls take its
// configured slots, it waits for one past by: they will finish.
func TestAdmitByWaitsForAProviderSlotUntilBy(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for _, learned := range []bool{true, false} {
		clock := clockwork.NewFakeClockAt(t0)
		l, err := NewLane(LaneConfig{Name: "c", Strategy: StrategyShape, RPM: 600, TPM: 1e6, Concurrency: 2,
			ColdStart: ColdStartStatic, WarmUp: -1, Start: StartFull, MinInterval: -1, Clock: clock})
		require.NoError(t, err)
		ps := sendN(t, l, t0, 2)
		if learned {
			// The provider refused the second: the lane holds one slot.
			require.NoError(t, ps[1].DoneAt(t0, Outcome{RateLimited: true, Headers: busyHeaders(true)}))
			require.Equal(t, 1, l.Snapshot().ConcurrencyLimit)
		}
		require.Equal(t, learned, l.ProviderHoldsSlots(), "learned %v", learned)
		ctx, cancel := context.WithCancel(context.Background())
		by := t0.Add(2 * time.Second)
		done := make(chan error, 1)
		go func() {
			_, err := l.AdmitBy(ctx, Request{PromptTokens: 10, MaxOutputTokens: 10}, by)
			done <- err
		}()
		require.Eventually(t, func() bool { return l.slots.Waiting() == 1 }, 10*time.Second, time.Millisecond)
		if learned {
			bctx, bcancel := context.WithTimeout(context.Background(), 10*time.Second)
			require.NoError(t, clock.BlockUntilContext(bctx, 1), "no timer bounds the wait for the slot")
			bcancel()
		}
		clock.Advance(3 * time.Second)
		if learned {
			var we *WaitError
			select {
			case err := <-done:
				require.ErrorAs(t, err, &we)
				require.Equal(t, by, we.Deadline)
			case <-time.After(10 * time.Second):
				t.Fatal("AdmitBy waited past by for a slot the provider holds")
			}
		} else {
			cancel()
			select {
			case err := <-done:
				require.ErrorIs(t, err, context.Canceled, "waited for its own calls past by")
			case <-time.After(10 * time.Second):
				t.Fatal("AdmitBy did not end with its context")
			}
		}
		cancel()
	}
}

// TestProviderHoldsSlotsAfterARefusal: on a lane whose slots the
// provider's calls at a time cap, the provider holds them while every slot
// is taken, and also once a call was refused for them, its slot free while
// its job backs off: the claim takes jobs with a fallback off the lane
// until an answer says the provider takes a call again.
func TestProviderHoldsSlotsAfterARefusal(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	l, err := NewLane(LaneConfig{Name: "c", Strategy: StrategyShape, RPM: 600, TPM: 1e6, Concurrency: 2,
		ColdStart: ColdStartStatic, WarmUp: -1, Start: StartFull, MinInterval: -1, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	ps := sendN(t, l, t0, 2)
	require.False(t, l.ProviderHoldsSlots(), "its own calls take the configured slots")
	require.NoError(t, ps[1].DoneAt(t0, Outcome{RateLimited: true, Headers: busyHeaders(true)}))
	require.Equal(t, 1, l.Snapshot().ConcurrencyLimit)
	require.True(t, l.ProviderHoldsSlots(), "the one slot taken under the learned cap")
	require.NoError(t, ps[0].DoneAt(t0, Outcome{PromptTokens: 10, CompletionTokens: 10}))
	require.False(t, l.ProviderHoldsSlots(), "an answer: the provider took a call")

	p := sendN(t, l, t0, 1)[0]
	require.True(t, l.ProviderHoldsSlots())
	require.NoError(t, p.DoneAt(t0, Outcome{RateLimited: true, Headers: busyHeaders(true)}))
	require.Equal(t, 0, l.slots.InFlight())
	require.True(t, l.ProviderHoldsSlots(), "the slot a refused call freed")
	p = sendN(t, l, t0, 1)[0]
	require.NoError(t, p.DoneAt(t0, Outcome{PromptTokens: 10, CompletionTokens: 10}))
	require.False(t, l.ProviderHoldsSlots(), "an answer since the refusal")
	// A refusal of the buckets says nothing of the calls at a time.
	p = sendN(t, l, t0, 1)[0]
	require.NoError(t, p.DoneAt(t0, Outcome{RateLimited: true, Headers: busyHeaders(false)}))
	require.False(t, l.ProviderHoldsSlots(), "a short bucket's refusal")
}
