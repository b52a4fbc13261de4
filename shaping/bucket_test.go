package shaping

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func sec(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func TestBucketDebtFIFO(t *testing.T) {
	t.Parallel()
	// 60 per minute = 1/s, capacity 2, full start.
	b, err := NewBucket(BucketConfig{Name: "rpm", Limit: 60, Capacity: 2}, t0)
	require.NoError(t, err)
	want := []float64{0, 0, 1, 2, 3}
	for i, w := range want {
		c, err := b.ReserveAt(t0, 1)
		require.NoError(t, err)
		require.Equal(t, sec(w), c.ReadyAt, "reservation %d", i)
	}
	require.InDelta(t, -3, b.LevelAt(t0), 1e-9)
	_, err = b.ReserveAt(t0, 3)
	require.ErrorIs(t, err, ErrTooLarge)
}

func TestBucketWarmUpCumulative(t *testing.T) {
	t.Parallel()
	// R = 1/s, T = 10 s: cumulative(t) = t²/20 during warm-up, 5 + (t-10) after.
	b, err := NewBucket(BucketConfig{Limit: 60, WarmUp: 10 * time.Second}, t0)
	require.NoError(t, err)
	require.Zero(t, b.LevelAt(t0))
	require.InDelta(t, 1.25, b.LevelAt(sec(5)), 1e-9)
	require.InDelta(t, 5, b.LevelAt(sec(10)), 1e-9)
	require.InDelta(t, 7, b.LevelAt(sec(12)), 1e-9)
	// A new bucket: 5 tokens are ready exactly when cumulative reaches 5.
	b2, err := NewBucket(BucketConfig{Limit: 60, WarmUp: 10 * time.Second}, t0)
	require.NoError(t, err)
	c, err := b2.ReserveAt(t0, 5)
	require.NoError(t, err)
	require.Equal(t, sec(10), c.ReadyAt)
	c, err = b2.ReserveAt(t0, 2)
	require.NoError(t, err)
	require.Equal(t, sec(12), c.ReadyAt)
}

func TestBucketCancelSettleAndChanges(t *testing.T) {
	t.Parallel()
	b, err := NewBucket(BucketConfig{Limit: 60, Capacity: 10, Start: StartEmpty}, t0)
	require.NoError(t, err)
	a, _ := b.ReserveAt(t0, 4) // ready at 4 s
	c, _ := b.ReserveAt(t0, 4) // ready at 8 s
	require.Equal(t, sec(8), c.ReadyAt)
	b.CancelAt(t0, c) // the last one: everything comes back
	require.InDelta(t, -4, b.LevelAt(t0), 1e-9)
	c, _ = b.ReserveAt(t0, 4)
	b.CancelAt(t0, a) // c depends on a's tokens: nothing comes back
	require.InDelta(t, -8, b.LevelAt(t0), 1e-9)
	// Settlement may drive the level further negative.
	b.SettleAt(t0, c, 10)
	require.InDelta(t, -14, b.LevelAt(t0), 1e-9)
	// Doubling the rate halves the time to recover.
	require.NoError(t, b.SetLimitAt(t0, 120))
	require.InDelta(t, 0, b.LevelAt(sec(7)), 1e-9)
	require.NoError(t, b.SetCapacityAt(sec(7), 5))
	require.InDelta(t, 5, b.LevelAt(sec(100)), 1e-9)
}

func TestBucketWaitDeadline(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(t0)
	b, err := NewBucket(BucketConfig{Limit: 60, Start: StartEmpty}, t0)
	require.NoError(t, err)
	ctx, cancel := context.WithDeadline(context.Background(), sec(2))
	defer cancel()
	err = b.Wait(ctx, clock, 5)
	var we *WaitError
	require.ErrorAs(t, err, &we)
	require.Equal(t, 5*time.Second, we.RetryAfter())
	require.InDelta(t, 0, b.LevelAt(t0), 1e-9, "a refused wait reserves nothing")
}

func TestParseHeaders(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Set("x-ratelimit-limit-requests", "60")
	h.Set("x-ratelimit-remaining-tokens", "149984")
	h.Set("x-ratelimit-reset-tokens", "6m0s")
	h.Set("retry-after", "20")
	r := ParseHeaders(h, t0)
	require.Equal(t, RateLimitHeaders{
		LimitRequests: 60, HasLimitRequests: true,
		RemainingTokens: 149984, HasRemainingTokens: true,
		ResetTokens: 6 * time.Minute, RetryAfter: 20 * time.Second, HasRetryAfter: true,
	}, r)
	h.Set("retry-after-ms", "1500")
	require.Equal(t, 1500*time.Millisecond, ParseHeaders(h, t0).RetryAfter)
}

func TestConcurrencyLimiterFIFOAndResize(t *testing.T) {
	t.Parallel()
	c := NewConcurrencyLimiter(1)
	require.True(t, c.TryAcquire())
	require.False(t, c.TryAcquire())
	got := make(chan int, 2)
	for i := range 2 {
		go func() {
			if c.Acquire(context.Background()) == nil {
				got <- i
			}
		}()
		require.Eventually(t, func() bool { return c.Waiting() == i+1 }, time.Second, time.Millisecond)
	}
	c.Release()
	require.Equal(t, 0, <-got, "first come, first served")
	c.SetLimit(2)
	require.Equal(t, 1, <-got, "a raised limit admits the next waiter")
	require.Equal(t, 2, c.InFlight())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, c.Acquire(ctx), context.Canceled)
}

func TestPacer(t *testing.T) {
	t.Parallel()
	p := NewPacer(100 * time.Millisecond)
	require.Equal(t, t0, p.ReserveAt(t0))
	require.Equal(t, sec(0.1), p.ReserveAt(t0))
	at := p.ReserveAt(t0)
	require.Equal(t, sec(0.2), at)
	p.CancelAt(at)
	require.Equal(t, sec(0.2), p.ReserveAt(sec(0.05)))
	require.Equal(t, sec(1), p.ReserveAt(sec(1)))
}

func TestLaneAdmit(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(t0)
	lane, err := NewLane(LaneConfig{Name: "k/m", Strategy: StrategyShape, RPM: 60, TPM: 6000, Concurrency: 1, WarmUp: -1, MinInterval: -1, Clock: clock})
	require.NoError(t, err)
	ctx := context.Background()

	_, err = lane.Admit(ctx, Request{PromptTokens: 6000, MaxOutputTokens: 1})
	require.ErrorIs(t, err, ErrTooLarge)

	p1, err := lane.Admit(ctx, Request{PromptTokens: 1000, MaxOutputTokens: 4000})
	require.NoError(t, err)
	require.Equal(t, 5000, p1.Tokens())

	// 5000 of 6000 used: the next 2000 is ready 10 s later (100 tokens/s).
	dl, cancel := context.WithDeadline(ctx, sec(5))
	defer cancel()
	_, err = lane.Admit(dl, Request{PromptTokens: 1000, MaxOutputTokens: 1000})
	var we *WaitError
	require.ErrorAs(t, err, &we)
	require.Equal(t, 10*time.Second, we.Wait)

	// Settling to the real usage gives back the unused output.
	require.NoError(t, p1.DoneAt(t0, Outcome{PromptTokens: 1000, CompletionTokens: 500}))
	require.ErrorIs(t, p1.Done(Outcome{}), ErrPermitDone)
	s := lane.Snapshot()
	require.InDelta(t, 4500, s.Buckets[1].Level, 1e-9)
	require.InDelta(t, 59, s.Buckets[0].Level, 1e-9)

	// A 429 pauses the whole lane until Retry-After.
	p2, err := lane.Admit(ctx, Request{PromptTokens: 10, MaxOutputTokens: 10})
	require.NoError(t, err)
	require.NoError(t, p2.Done(Outcome{RateLimited: true, Headers: RateLimitHeaders{RetryAfter: 3 * time.Second, HasRetryAfter: true}}))
	done := make(chan error, 1)
	go func() {
		p, err := lane.Admit(ctx, Request{PromptTokens: 10, MaxOutputTokens: 10})
		if err == nil {
			err = p.Done(Outcome{})
		}
		done <- err
	}()
	// The waiter parks on one timer due exactly at sec(3), the end of the
	// pause: it is still waiting 1ns before and admitted at sec(3).
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	require.NoError(t, clock.BlockUntilContext(wctx, 1))
	clock.Advance(3*time.Second - time.Nanosecond)
	select {
	case err := <-done:
		t.Fatalf("admitted before the pause ended (err %v)", err)
	default:
	}
	clock.Advance(time.Nanosecond)
	require.Equal(t, sec(3), clock.Now())
	require.NoError(t, <-done)
	require.Equal(t, uint64(1), lane.Snapshot().RateLimited)
}

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

func TestEstimator(t *testing.T) {
	t.Parallel()
	e, err := NewEstimator(EstimatorConfig{MinSamples: 4})
	require.NoError(t, err)
	est, err := e.EstimateBody([]byte(`{"model":"gpt-4o-mini","max_tokens":100,"n":2,"messages":[{"role":"user","content":"Hello world"}]}`))
	require.NoError(t, err)
	// 3 priming + 3 per message + "user" (1) + "Hello world" (2)
	require.Equal(t, Estimate{Model: "gpt-4o-mini", PromptTokens: 9, SafePromptTokens: 9, MaxOutputTokens: 200}, est)
	for _, actual := range []int{100, 110, 120, 130} {
		e.Observe("m", 100, actual)
	}
	st := e.Stats("m")
	require.Equal(t, ErrorStats{Count: 4, P50: 1.1, P95: 1.3, Safety: 1.3}, st)
	require.Equal(t, 1.0, e.Safety("other"))
	_, err = e.EstimateBody([]byte(`{`))
	var se *json.SyntaxError
	require.ErrorAs(t, err, &se)
}

func TestBucketRetimeQueued(t *testing.T) {
	t.Parallel()
	b, err := NewBucket(BucketConfig{Limit: 60, Capacity: 10, Start: StartEmpty}, t0)
	require.NoError(t, err)
	c, _ := b.ReserveAt(t0, 4) // ready at 4 s
	require.Equal(t, sec(4), b.ReadyAt(c))
	// The server says 2 tokens fewer: the queued reservation waits 2 s more.
	b.LowerAt(sec(1), -5)
	require.Equal(t, sec(6), b.ReadyAt(c))
	// Halving the rate stretches what is left of the wait.
	require.NoError(t, b.SetLimitAt(sec(2), 30))
	require.Equal(t, sec(10), b.ReadyAt(c))
	// A reservation made after the corrections is computed afresh.
	c2, _ := b.ReserveAt(sec(2), 1)
	require.Equal(t, sec(12), c2.ReadyAt)
	require.Equal(t, c2.ReadyAt, b.ReadyAt(c2))
}
