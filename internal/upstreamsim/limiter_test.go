package upstreamsim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestLimiterTable(t *testing.T) {
	t.Parallel()
	lim := Limits{RPM: 60, TPM: 600, BurstFloor: 1}
	type step struct {
		at       time.Duration
		tokens   int64
		allowed  bool
		reason   Reason
		retry    time.Duration
		remReq   int64
		remTok   int64
		resetReq time.Duration
		resetTok time.Duration
	}
	steps := []step{
		// Full buckets: 60 requests, 600 tokens; 1 request/s and 10 tokens/s refill.
		{at: 0, tokens: 100, allowed: true, remReq: 59, remTok: 500, resetReq: time.Second, resetTok: 10 * time.Second},
		{at: 0, tokens: 450, allowed: true, remReq: 58, remTok: 50, resetReq: 2 * time.Second, resetTok: 55 * time.Second},
		// 100 tokens needed, 50 held: wait 5s; the rejected request still costs an RPM unit.
		{at: 0, tokens: 100, reason: ReasonTokens, retry: 5 * time.Second, remReq: 57, remTok: 50, resetReq: 3 * time.Second, resetTok: 55 * time.Second},
		// 5s later the bucket holds 100 tokens (and is back to 60 requests, capped).
		{at: 5 * time.Second, tokens: 100, allowed: true, remReq: 59, remTok: 0, resetReq: time.Second, resetTok: time.Minute},
		// Larger than the whole TPM limit: never succeeds.
		{at: 5 * time.Second, tokens: 601, reason: ReasonTooLarge, remReq: 58, remTok: 0, resetReq: 2 * time.Second, resetTok: time.Minute},
		// 150ms later: 1.5 tokens.
		{at: 5150 * time.Millisecond, tokens: 2, reason: ReasonTokens, retry: 50 * time.Millisecond, remReq: 57, remTok: 1, resetReq: 2850 * time.Millisecond, resetTok: 59850 * time.Millisecond},
	}
	l := NewLimiter()
	for i, s := range steps {
		d := l.Admit(t0.Add(s.at), lim, Admission{Key: "k", Model: "m", Tokens: s.tokens})
		require.Equal(t, s.allowed, d.Allowed, "step %d", i)
		require.Equal(t, s.reason, d.Reason, "step %d", i)
		require.Equal(t, s.retry, d.RetryAfter, "step %d", i)
		require.Equal(t, s.remReq, d.RemainingRequests, "step %d", i)
		require.Equal(t, s.remTok, d.RemainingTokens, "step %d", i)
		require.Equal(t, s.resetReq, d.ResetRequests, "step %d", i)
		require.Equal(t, s.resetTok, d.ResetTokens, "step %d", i)
		if d.Allowed {
			l.Release("k", "m")
		}
	}
}

func TestLimiterRPMEmpty(t *testing.T) {
	t.Parallel()
	l := NewLimiter()
	lim := Limits{RPM: 3, TPM: -1}
	for range 3 {
		d := l.Admit(t0, lim, Admission{Key: "k", Model: "m", Tokens: 1})
		require.True(t, d.Allowed)
	}
	d := l.Admit(t0, lim, Admission{Key: "k", Model: "m", Tokens: 1})
	require.False(t, d.Allowed)
	require.Equal(t, ReasonRequests, d.Reason)
	require.Equal(t, 20*time.Second, d.RetryAfter)
	require.Equal(t, int64(3), d.UsedRequests)
	require.Equal(t, int64(0), d.RemainingRequests)
	// Another key and another model have their own buckets.
	require.True(t, l.Admit(t0, lim, Admission{Key: "k2", Model: "m"}).Allowed)
	require.True(t, l.Admit(t0, lim, Admission{Key: "k", Model: "m2"}).Allowed)
	// 20s later one request fits again.
	require.True(t, l.Admit(t0.Add(20*time.Second), lim, Admission{Key: "k", Model: "m"}).Allowed)
}

func TestLimiterConcurrency(t *testing.T) {
	t.Parallel()
	l := NewLimiter()
	lim := Limits{RPM: 100, TPM: -1, MaxConcurrency: 2}
	a := Admission{Key: "k", Model: "m"}
	require.True(t, l.Admit(t0, lim, a).Allowed)
	require.True(t, l.Admit(t0, lim, a).Allowed)
	d := l.Admit(t0, lim, a)
	require.Equal(t, ReasonConcurrency, d.Reason)
	require.Equal(t, 2, d.InFlight)
	require.Equal(t, int64(97), d.RemainingRequests, "a rejected request counts toward RPM")
	l.Release("k", "m")
	require.True(t, l.Admit(t0, lim, a).Allowed)
}

func TestLimiterBurst(t *testing.T) {
	t.Parallel()
	l := NewLimiter()
	lim := Limits{RPM: -1, TPM: -1, BurstGrowth: 2, BurstFloor: 2}
	a := Admission{Key: "k", Model: "m"}
	admitted := func(at time.Time, n int) int {
		ok := 0
		for range n {
			if d := l.Admit(at, lim, a); d.Allowed {
				ok++
				l.Release("k", "m")
			} else {
				require.Equal(t, ReasonBurst, d.Reason)
			}
		}
		return ok
	}
	// From cold: the floor (2), then at most twice the previous second.
	require.Equal(t, 2, admitted(t0, 100))
	require.Equal(t, 4, admitted(t0.Add(time.Second), 100))
	require.Equal(t, 8, admitted(t0.Add(2*time.Second), 100))
	d := l.Admit(t0.Add(2500*time.Millisecond), lim, a)
	require.Equal(t, ReasonBurst, d.Reason)
	require.Equal(t, 500*time.Millisecond, d.RetryAfter)
	// After an idle second the ramp starts again from the floor.
	require.Equal(t, 2, admitted(t0.Add(4*time.Second), 100))
}

func TestLimiterLimitChange(t *testing.T) {
	t.Parallel()
	l := NewLimiter()
	a := Admission{Key: "k", Model: "m", Tokens: 10}
	d := l.Admit(t0, Limits{RPM: 600, TPM: -1}, a)
	require.Equal(t, int64(599), d.RemainingRequests)
	// The limit drops to 60: the level is capped at 60 and refills at 1/s.
	d = l.Admit(t0, Limits{RPM: 60, TPM: -1}, a)
	require.Equal(t, int64(59), d.RemainingRequests)
	require.Equal(t, time.Second, d.ResetRequests)
}

// Sending at twice the RPM gets exactly the RPM accepted per minute once
// the initial full bucket has been spent.
func TestLimiterTwiceRPM(t *testing.T) {
	t.Parallel()
	const rpm = 600
	l := NewLimiter()
	lim := Limits{RPM: rpm, TPM: -1}
	interval := time.Minute / (2 * rpm)
	count := func(from, to time.Duration) int {
		ok := 0
		for at := from; at < to; at += interval {
			d := l.Admit(t0.Add(at), lim, Admission{Key: "k", Model: "m"})
			if d.Allowed {
				ok++
				l.Release("k", "m")
			}
		}
		return ok
	}
	first := count(0, time.Minute)
	// The first minute gets the full bucket plus one minute of refill.
	require.InDelta(t, 2*rpm, first, 2*rpm*0.01)
	second := count(time.Minute, 2*time.Minute)
	require.InDelta(t, rpm, second, rpm*0.01)
	third := count(2*time.Minute, 3*time.Minute)
	require.InDelta(t, rpm, third, rpm*0.01)
}

// Sending a short/long mix at twice the TPM gets exactly the TPM accepted
// per minute in steady state.
func TestLimiterTwiceTPM(t *testing.T) {
	t.Parallel()
	const tpm = 200_000
	l := NewLimiter()
	lim := Limits{RPM: -1, TPM: tpm}
	sizes := []int64{100, 100, 100, 1000, 100, 2000} // short and long; mean 566.7 tokens
	var mean float64
	for _, s := range sizes {
		mean += float64(s)
	}
	mean /= float64(len(sizes))
	interval := time.Duration(float64(time.Minute) / (2 * tpm / mean))
	i := 0
	count := func(from, to time.Duration) int64 {
		var tokens int64
		for at := from; at < to; at += interval {
			s := sizes[i%len(sizes)]
			i++
			if d := l.Admit(t0.Add(at), lim, Admission{Key: "k", Model: "m", Tokens: s}); d.Allowed {
				tokens += s
				l.Release("k", "m")
			}
		}
		return tokens
	}
	count(0, time.Minute) // spend the initial full bucket
	for m := 1; m <= 3; m++ {
		got := count(time.Duration(m)*time.Minute, time.Duration(m+1)*time.Minute)
		require.InDelta(t, tpm, got, tpm*0.01, "minute %d", m)
	}
}

// TestLimiterShortBuckets: with short enforcement (5 s), a burst beyond 5 s
// of refill is refused while the per-minute view (remaining, used, reset)
// still shows room; a request larger than the short bucket goes when it is
// full and leaves it in debt.
func TestLimiterShortBuckets(t *testing.T) {
	t.Parallel()
	l := NewLimiter(ShortBuckets(5 * time.Second))
	lim := Limits{RPM: 600, TPM: 60000, BurstFloor: 1} // 5 s: 50 requests, 5000 tokens
	type step struct {
		at      time.Duration
		tokens  int64
		allowed bool
		retry   time.Duration
		remReq  int64
		remTok  int64
	}
	for i, s := range []step{
		{at: 0, tokens: 3000, allowed: true, remReq: 599, remTok: 57000},
		{at: 0, tokens: 2000, allowed: true, remReq: 598, remTok: 55000},
		// The short bucket is empty; the minute says 55,000 remain.
		{at: 0, tokens: 100, retry: 100 * time.Millisecond, remReq: 597, remTok: 55000},
		{at: time.Second, tokens: 1000, allowed: true, remReq: 599, remTok: 55000},
		// Full again after 5 s; 8,000 is larger than it: it goes, in debt.
		{at: 6 * time.Second, tokens: 8000, allowed: true, remReq: 599, remTok: 52000},
		{at: 6 * time.Second, tokens: 10, retry: 3010 * time.Millisecond, remReq: 598, remTok: 52000},
		{at: 9010 * time.Millisecond, tokens: 10, allowed: true, remReq: 599, remTok: 55000},
	} {
		d := l.Admit(t0.Add(s.at), lim, Admission{Key: "k", Model: "m", Tokens: s.tokens})
		require.Equal(t, s.allowed, d.Allowed, "step %d", i)
		if !s.allowed {
			require.Equal(t, ReasonTokens, d.Reason, "step %d", i)
		}
		require.Equal(t, s.retry, d.RetryAfter, "step %d", i)
		require.Equal(t, []int64{s.remReq, s.remTok}, []int64{d.RemainingRequests, d.RemainingTokens}, "step %d", i)
		if d.Allowed {
			l.Release("k", "m")
		}
	}

	// Requests: 5 s of 60 RPM is 5; the sixth waits a second, and being
	// refused by a request bucket costs no request.
	rl := NewLimiter(ShortBuckets(5 * time.Second))
	rpm := Limits{RPM: 60, TPM: -1}
	for range 5 {
		require.True(t, rl.Admit(t0, rpm, Admission{Key: "k", Model: "m"}).Allowed)
	}
	d := rl.Admit(t0, rpm, Admission{Key: "k", Model: "m"})
	require.Equal(t, ReasonRequests, d.Reason)
	require.Equal(t, time.Second, d.RetryAfter)
	require.Equal(t, int64(55), d.RemainingRequests)
	require.Equal(t, int64(5), d.UsedRequests)
	require.True(t, rl.Admit(t0.Add(time.Second), rpm, Admission{Key: "k", Model: "m"}).Allowed)

	// Refunds (true-up) go back to both buckets, each up to its capacity.
	l.Refund("k", "m", 100000)
	d = l.Admit(t0.Add(9010*time.Millisecond), lim, Admission{Key: "k", Model: "m", Tokens: 5000})
	require.True(t, d.Allowed)
	require.Equal(t, int64(55000), d.RemainingTokens)
}
