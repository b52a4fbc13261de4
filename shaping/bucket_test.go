package shaping

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

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

func TestBucketConfigDefaults(t *testing.T) {
	t.Parallel()
	require.Equal(t, BucketConfig{Limit: 60, Per: time.Minute, Capacity: 60, Start: StartFull}, BucketConfig{Limit: 60}.WithDefaults())
	require.Equal(t, BucketConfig{Limit: 60, Per: time.Minute, Capacity: 60, WarmUp: time.Second, Start: StartEmpty},
		BucketConfig{Limit: 60, WarmUp: time.Second}.WithDefaults(), "empty with warm-up")
	set := BucketConfig{Limit: 60, Per: time.Second, Capacity: 5, WarmUp: time.Second, Start: StartFull}
	require.Equal(t, set, set.WithDefaults())

	// A limit per second refills 60 times faster than per minute.
	b, err := NewBucket(BucketConfig{Limit: 2, Per: time.Second, Capacity: 10, Start: StartEmpty}, t0)
	require.NoError(t, err)
	require.Equal(t, 2.0, b.Limit())
	require.Equal(t, 10.0, b.Capacity())
	require.InDelta(t, 3, b.LevelAt(sec(1.5)), 1e-9)
}

func TestBucketConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg BucketConfig
		err string // "" = valid
	}{
		{BucketConfig{}, "BucketConfig.Limit must be > 0, got 0"},
		{BucketConfig{Limit: -1}, "BucketConfig.Limit must be > 0, got -1"},
		{BucketConfig{Limit: math.NaN()}, "BucketConfig.Limit must be > 0, got NaN"},
		{BucketConfig{Limit: math.Inf(1)}, "BucketConfig.Limit must be > 0, got +Inf"},
		{BucketConfig{Limit: 1e-9}, ""},
		{BucketConfig{Limit: 1, Per: -1}, "BucketConfig.Per must be >= 0, got -1ns"},
		{BucketConfig{Limit: 1, Capacity: -1}, "BucketConfig.Capacity must be >= 0, got -1"},
		{BucketConfig{Limit: 1, Capacity: math.Inf(1)}, "BucketConfig.Capacity must be >= 0, got +Inf"},
		{BucketConfig{Limit: 1, Capacity: math.NaN()}, "BucketConfig.Capacity must be >= 0, got NaN"},
		{BucketConfig{Limit: 1, WarmUp: -1}, "BucketConfig.WarmUp must be >= 0, got -1ns"},
		{BucketConfig{Limit: 1, Start: -1}, "BucketConfig.Start unknown value -1"},
		{BucketConfig{Limit: 1, Start: StartEmpty + 1}, "BucketConfig.Start unknown value 3"},
		{BucketConfig{Limit: 1, Start: StartEmpty}, ""},
	} {
		b, err := NewBucket(tc.cfg, t0)
		if tc.err == "" {
			require.NoError(t, err, "%+v", tc.cfg)
			require.NotNil(t, b)
			continue
		}
		require.ErrorIs(t, err, ErrInvalidConfig)
		require.EqualError(t, err, "shaping: invalid config: "+tc.err)
		require.Nil(t, b)
	}
}

// TestBucketRetimeOrder: a correction moves only the reservations handed out
// before it, and a rate change does not move a reservation that was ready
// before the change; a level cut below zero does.
func TestBucketRetimeOrder(t *testing.T) {
	t.Parallel()
	b, err := NewBucket(BucketConfig{Limit: 60, Capacity: 10, Start: StartEmpty}, t0)
	require.NoError(t, err)
	c1, _ := b.ReserveAt(t0, 4) // ready at 4 s
	b.LowerAt(sec(1), -5)       // 2 tokens short: c1 at 6 s
	c2, _ := b.ReserveAt(sec(1), 1)
	require.Equal(t, sec(7), c2.ReadyAt, "computed after the cut")
	require.NoError(t, b.SetLimitAt(sec(2), 30)) // half the rate from 2 s
	require.Equal(t, sec(10), b.ReadyAt(c1), "both corrections")
	require.Equal(t, sec(12), b.ReadyAt(c2), "only the rate change")

	full, err := NewBucket(BucketConfig{Limit: 60, Capacity: 10}, t0)
	require.NoError(t, err)
	ready, _ := full.ReserveAt(t0, 1)
	require.Equal(t, t0, ready.ReadyAt)
	require.NoError(t, full.SetLimitAt(sec(5), 30))
	require.Equal(t, t0, full.ReadyAt(ready), "ready before the rate change")

	cut, err := NewBucket(BucketConfig{Limit: 60, Capacity: 10}, t0)
	require.NoError(t, err)
	ready, _ = cut.ReserveAt(t0, 1)
	cut.LowerAt(sec(2), -3) // 3 tokens short at 2 s
	require.Equal(t, sec(5), cut.ReadyAt(ready), "a cut below zero delays even a reservation that was ready")

	other, err := NewBucket(BucketConfig{Limit: 60}, t0)
	require.NoError(t, err)
	require.Equal(t, c1.ReadyAt, other.ReadyAt(c1), "another bucket's claim is returned as is")
}

// TestBucketCorrectionsCompose: corrections that change nothing leave the
// ready times as handed out; any number of them compose, none forgotten;
// a raised rate brings a queued reservation earlier as a lowered one moves
// it later, however often the rate goes up and down.
func TestBucketCorrectionsCompose(t *testing.T) {
	t.Parallel()
	b, err := NewBucket(BucketConfig{Limit: 60, Capacity: 10, Start: StartEmpty}, t0)
	require.NoError(t, err)
	c, _ := b.ReserveAt(t0, 4)
	b.LowerAt(sec(1), -5) // c at 6 s
	for range 100 {
		require.NoError(t, b.SetLimitAt(sec(1), 60)) // the same rate
		b.LowerAt(sec(1), -5)                        // the same level
		b.LowerAt(sec(1), 0)                         // above the level
	}
	require.Equal(t, sec(6), b.ReadyAt(c))

	b, err = NewBucket(BucketConfig{Limit: 60, Capacity: 10, Start: StartEmpty}, t0)
	require.NoError(t, err)
	c, _ = b.ReserveAt(t0, 4)
	for i := range 100 {
		b.LowerAt(sec(1), float64(-4-i)) // one token short each time
	}
	require.Equal(t, sec(104), b.ReadyAt(c), "100 corrections, none forgotten")

	// A cut below zero delays the reservations taken before it, not one
	// taken after it from tokens a settlement gave back.
	b, err = NewBucket(BucketConfig{Limit: 60, Capacity: 10}, t0)
	require.NoError(t, err)
	c, err = b.ReserveAt(t0, 2)
	require.NoError(t, err)
	b.LowerAt(t0, -3)
	b.AdjustAt(t0, 5)
	after, err := b.ReserveAt(t0, 2)
	require.NoError(t, err)
	require.Equal(t, t0, after.ReadyAt)
	require.NoError(t, b.SetLimitAt(t0, 120))
	require.Equal(t, sec(1.5), b.ReadyAt(c), "3 tokens at 2 a second")
	require.Equal(t, t0, b.ReadyAt(after))

	// A raised rate alone brings a queued reservation earlier: 30 tokens
	// short, 10 refilled at 1 a second, the other 20 at 2.
	b, err = NewBucket(BucketConfig{Limit: 60, Start: StartEmpty}, t0)
	require.NoError(t, err)
	c, err = b.ReserveAt(t0, 30)
	require.NoError(t, err)
	require.Equal(t, sec(30), c.ReadyAt)
	require.NoError(t, b.SetLimitAt(sec(10), 120))
	require.Equal(t, sec(20), b.ReadyAt(c))

	// 50 tokens short at 1 token a second; every 0.5 s the rate goes
	// to 3 a second and back: 2 tokens a second, 48.5 at 24.5 s, the
	// last 1.5 at 3 a second: ready at 25 s, as without the changes at 2
	// a second, not at 50 s.
	b, err = NewBucket(BucketConfig{Limit: 60, Start: StartEmpty}, t0)
	require.NoError(t, err)
	c, err = b.ReserveAt(t0, 50)
	require.NoError(t, err)
	require.Equal(t, sec(50), c.ReadyAt)
	for i := range 50 {
		require.NoError(t, b.SetLimitAt(sec(0.5*float64(i)), []float64{60, 180}[i%2]))
	}
	require.WithinDuration(t, sec(25), b.ReadyAt(c), time.Microsecond)
}

func TestBucketSetLimitAndCapacity(t *testing.T) {
	t.Parallel()
	b, err := NewBucket(BucketConfig{Name: "tpm", Limit: 60}, t0)
	require.NoError(t, err)
	for _, bad := range []float64{0, -1, math.Inf(1), math.NaN()} {
		require.EqualError(t, b.SetLimitAt(t0, bad), fmt.Sprintf("shaping: invalid config: bucket \"tpm\" limit must be > 0, got %v", bad))
		require.EqualError(t, b.SetCapacityAt(t0, bad), fmt.Sprintf("shaping: invalid config: bucket \"tpm\" capacity must be > 0, got %v", bad))
	}
	require.Equal(t, 60.0, b.Limit())
	require.Equal(t, 60.0, b.Capacity())
	require.NoError(t, b.SetCapacityAt(t0, 60))
	c, err := b.ReserveAt(t0, 60)
	require.NoError(t, err, "exactly the capacity fits")
	require.Equal(t, t0, c.ReadyAt)
	_, err = b.ReserveAt(t0, 60.001)
	require.ErrorIs(t, err, ErrTooLarge)
	require.EqualError(t, err, `shaping: request larger than bucket capacity: 60.001 tokens, bucket "tpm" holds 60`)
}

// TestBucketWarmUpRate: during warm-up the time for n tokens is
// sqrt(2 T n / R), after it (n - RT/2)/R + T; R = 2 tokens/s here.
func TestBucketWarmUpRate(t *testing.T) {
	t.Parallel()
	b, err := NewBucket(BucketConfig{Limit: 120, Capacity: 100, WarmUp: 10 * time.Second}, t0)
	require.NoError(t, err)
	c, _ := b.ReserveAt(t0, 4)
	require.Equal(t, t0.Add(time.Duration(math.Ceil(math.Sqrt(40)*1e9))), c.ReadyAt)
	c, _ = b.ReserveAt(t0, 10) // 14 in all, 10 by the end of warm-up
	require.Equal(t, sec(12), c.ReadyAt)
	require.InDelta(t, 2*12-10-14, b.LevelAt(sec(12)), 1e-9)
}

// TestBucketRebase: an hour after warm-up the origin moves to the last
// refill (small float seconds), and nothing observable changes; a warm-up
// longer than an hour is not cut short by it.
func TestBucketRebase(t *testing.T) {
	t.Parallel()
	b, err := NewBucket(BucketConfig{Limit: 60, Capacity: 1e6, Start: StartEmpty}, t0)
	require.NoError(t, err)
	require.InDelta(t, 3599, b.LevelAt(sec(3599)), 1e-6)
	require.Equal(t, t0, b.origin, "not yet an hour")
	require.InDelta(t, 7200, b.LevelAt(sec(7200)), 1e-6)
	require.Equal(t, sec(7200), b.origin)
	require.Zero(t, b.last)
	c, _ := b.ReserveAt(sec(7200), 7210)
	require.Equal(t, sec(7210), c.ReadyAt)

	long, err := NewBucket(BucketConfig{Limit: 60, Capacity: 1e6, WarmUp: 2 * time.Hour}, t0)
	require.NoError(t, err)
	require.InDelta(t, 3600.0*3600/14400, long.LevelAt(sec(3600)), 1e-6)
	require.InDelta(t, 5400.0*5400/14400, long.LevelAt(sec(5400)), 1e-6)
	require.Equal(t, t0, long.origin, "still warming up")
}

// TestBucketCancelKeepsLaterClaims: a cancelled claim gives back only what
// the claims made after it do not already count on.
func TestBucketCancelKeepsLaterClaims(t *testing.T) {
	t.Parallel()
	b, err := NewBucket(BucketConfig{Limit: 60, Capacity: 10, Start: StartEmpty}, t0)
	require.NoError(t, err)
	a, _ := b.ReserveAt(t0, 4) // ready at 4 s
	c, _ := b.ReserveAt(t0, 1) // ready at 5 s: counts on 1 s of a's refill
	require.Equal(t, sec(5), c.ReadyAt)
	b.CancelAt(t0, a)
	require.InDelta(t, -2, b.LevelAt(t0), 1e-9, "3 of a's 4 tokens come back")
	b.CancelAt(t0, Claim{}) // not this bucket's: nothing
	b.CancelAt(t0, Claim{bucket: b})
	require.InDelta(t, -2, b.LevelAt(t0), 1e-9)
	b.SettleAt(t0, Claim{Tokens: 5}, 0) // not this bucket's: nothing
	require.InDelta(t, -2, b.LevelAt(t0), 1e-9)
}

// TestBucketWaitCancelled: a Wait whose context ends gives its tokens back;
// one that is covered returns when the clock reaches the ready time.
func TestBucketWaitCancelled(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(t0)
	b, err := NewBucket(BucketConfig{Limit: 60, Start: StartEmpty}, t0)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Wait(ctx, clock, 5) }()
	wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer wcancel()
	require.NoError(t, clock.BlockUntilContext(wctx, 1))
	require.InDelta(t, -5, b.LevelAt(t0), 1e-9)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.InDelta(t, 0, b.LevelAt(t0), 1e-9, "given back")

	go func() { done <- b.Wait(context.Background(), clock, 2) }()
	require.NoError(t, clock.BlockUntilContext(wctx, 1))
	clock.Advance(2 * time.Second)
	require.NoError(t, <-done)
	require.InDelta(t, 0, b.LevelAt(sec(2)), 1e-9)
	_, err = b.ReserveAt(t0, 61)
	require.ErrorIs(t, err, ErrTooLarge)
	require.ErrorIs(t, b.Wait(context.Background(), clock, 61), ErrTooLarge)
}

// TestBucketRaiseRetimesEarlier: a level raised (from a server's header)
// makes the reservations queued behind the debt ready earlier by the time
// the refill takes to bring the difference, never before the raise; those
// ready already, and reservations made after the raise, stay.
func TestBucketRaiseRetimesEarlier(t *testing.T) {
	t.Parallel()
	b, err := NewBucket(BucketConfig{Name: "tpm", Limit: 600, Start: StartEmpty}, t0) // 10/s
	require.NoError(t, err)
	c1, err := b.ReserveAt(t0, 10) // ready at 1 s
	require.NoError(t, err)
	c2, err := b.ReserveAt(t0, 30) // ready at 4 s
	require.NoError(t, err)
	require.Equal(t, []time.Time{sec(1), sec(4)}, []time.Time{c1.ReadyAt, c2.ReadyAt})
	require.True(t, b.calibrateAt(sec(0.5), 15, 15, true), "a raise from -35 to 15 (level at 0.5 s: -35)")
	require.Equal(t, sec(0.5), b.ReadyAt(c1), "5 s earlier, but not before the raise")
	require.Equal(t, sec(0.5), b.ReadyAt(c2))
	require.InDelta(t, 15, b.LevelAt(sec(0.5)), 1e-9)
	c3, err := b.ReserveAt(sec(0.5), 25) // 10 short: ready 1 s later
	require.NoError(t, err)
	require.Equal(t, sec(1.5), c3.ReadyAt)
	require.False(t, b.calibrateAt(sec(0.5), -100, 1000, true), "inside the band: no change")
	require.Equal(t, sec(1.5), b.ReadyAt(c3))
	require.True(t, b.calibrateAt(sec(1), -5+3, 500, true), "-5 raised to -2: 0.3 s earlier")
	require.Equal(t, sec(1.2), b.ReadyAt(c3))
	require.False(t, b.calibrateAt(sec(1), 500, 500, false), "no raise when not allowed")
	require.InDelta(t, -2, b.LevelAt(sec(1)), 1e-9)
	require.False(t, b.calibrateAt(sec(1), -10, -10, true), "lowered to the band's top")
	require.Equal(t, sec(2), b.ReadyAt(c3), "a cut delays it again")
	require.True(t, b.calibrateAt(sec(1), 1e9, 1e9, true))
	require.InDelta(t, 600, b.LevelAt(sec(1)), 1e-9, "at most the capacity")
	require.Equal(t, sec(1), b.ReadyAt(c3))

	// No raise during the warm-up; once it ends, the refill is linear.
	w, err := NewBucket(BucketConfig{Name: "warm", Limit: 600, WarmUp: 10 * time.Second}, t0)
	require.NoError(t, err)
	require.False(t, w.calibrateAt(sec(1), 100, 100, true))
	require.True(t, w.warmingAt(sec(9.9)))
	w.endWarmUpAt(sec(2))
	require.False(t, w.warmingAt(sec(2)))
	before := w.LevelAt(sec(2))
	require.InDelta(t, before+10, w.LevelAt(sec(3)), 1e-9, "the full rate at once")
	require.True(t, w.calibrateAt(sec(3), 100, 100, true))
}

// TestBucketLargerThanCapacity: below the largest reservation (a lane's
// provider limit), a request larger than the capacity waits for a full
// bucket and leaves it in debt; above it, it is too large.
func TestBucketLargerThanCapacity(t *testing.T) {
	t.Parallel()
	b, err := NewBucket(BucketConfig{Name: "tpm", Limit: 600}, t0) // 10/s, full
	require.NoError(t, err)
	b.setCapacity(100, 600)
	c1, err := b.ReserveAt(t0, 250) // the bucket is full: at once
	require.NoError(t, err)
	require.Equal(t, t0, c1.ReadyAt)
	require.InDelta(t, -150, b.LevelAt(t0), 1e-9)
	c2, err := b.ReserveAt(t0, 300) // waits until the bucket is full again: 25 s
	require.NoError(t, err)
	require.Equal(t, sec(25), c2.ReadyAt)
	c3, err := b.ReserveAt(t0, 10) // behind it: its debt of 200, then 10
	require.NoError(t, err)
	require.Equal(t, sec(46), c3.ReadyAt)
	_, err = b.ReserveAt(t0, 601)
	require.ErrorIs(t, err, ErrTooLarge)
	require.EqualError(t, err, `shaping: request larger than bucket capacity: 601 tokens, bucket "tpm" holds 600`)
	require.NoError(t, b.SetCapacityAt(t0, 50))
	_, err = b.ReserveAt(t0, 51)
	require.ErrorIs(t, err, ErrTooLarge, "SetCapacityAt sets the largest reservation too")
}
