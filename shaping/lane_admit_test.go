package shaping

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

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

// stubController returns the limits a test sets.
type stubController struct{ limit, tick, update int }

func (c *stubController) Update(Sample) int  { c.limit = c.update; return c.limit }
func (c *stubController) Tick(time.Time) int { c.limit = c.tick; return c.limit }
func (c *stubController) Limit() int         { return c.limit }

// TestLaneAdmitPauseGivesSlotBack: a 429 pause that begins while Admit
// waits for a slot makes it give the slot back; it fails at once when the
// pause passes its deadline, and otherwise sleeps out the pause without the
// slot. The stub controller opens the slot only after the pause is set.
func TestLaneAdmitPauseGivesSlotBack(t *testing.T) {
	t.Parallel()
	// The context's deadline is on the real clock: the fake one starts in
	// the future so that it does not expire.
	start := time.Now().Add(time.Hour).Truncate(time.Second)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	clock := clockwork.NewFakeClockAt(start)
	ctrl := &stubController{limit: 2, tick: 2, update: 2}
	lane, err := NewLane(LaneConfig{Strategy: StrategyAdaptive, RPM: 6000, TPM: 1e6, WarmUp: -1, MinInterval: -1, Controller: ctrl, Clock: clock})
	require.NoError(t, err)
	ctx := context.Background()
	req := Request{PromptTokens: 10, MaxOutputTokens: 10}
	p1, err := lane.Admit(ctx, req)
	require.NoError(t, err)
	p2, err := lane.Admit(ctx, req)
	require.NoError(t, err)
	ctrl.tick = 1 // the next Admit's tick lowers the limit below the two in flight

	// admit runs Admit until it waits for a slot; its channel gets the
	// permit's send time, or the error.
	type result struct {
		sentAt time.Time
		err    error
	}
	admit := func(ctx context.Context) chan result {
		done := make(chan result, 1)
		go func() {
			p, err := lane.Admit(ctx, req)
			if err == nil {
				err = p.Done(Outcome{})
			}
			done <- result{p.SentAt(), err}
		}()
		require.Eventually(t, func() bool { return lane.Snapshot().Waiting == 1 }, 5*time.Second, time.Millisecond)
		return done
	}
	recv := func(done chan result) result {
		select {
		case r := <-done:
			return r
		case <-time.After(5 * time.Second):
			t.Fatal("Admit did not return")
			return result{}
		}
	}
	dl, cancel := context.WithDeadline(ctx, at(5))
	defer cancel()
	done := admit(dl)
	require.NoError(t, p1.DoneAt(start, Outcome{RateLimited: true, Headers: RateLimitHeaders{RetryAfter: 10 * time.Second, HasRetryAfter: true}}))
	require.Equal(t, result{err: &WaitError{Wait: 10 * time.Second, Deadline: at(5)}}, recv(done))
	s := lane.Snapshot()
	require.Equal(t, 1, s.InFlight, "only p2")
	require.InDelta(t, 6000-2, s.Buckets[0].Level, 1e-9, "the failed admission reserved nothing")

	// Once that pause is over, a new one begins while Admit waits for a
	// slot: it sleeps the pause out without the slot.
	clock.Advance(10 * time.Second)
	ctrl.tick = 2
	p3, err := lane.Admit(ctx, req)
	require.NoError(t, err)
	ctrl.tick = 1
	done = admit(ctx)
	require.NoError(t, p2.DoneAt(at(10), Outcome{RateLimited: true, Headers: RateLimitHeaders{RetryAfter: 10 * time.Second, HasRetryAfter: true}}))
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	require.NoError(t, clock.BlockUntilContext(wctx, 1))
	require.Equal(t, 1, lane.Snapshot().InFlight, "only p3: the slot is given back for the pause")
	clock.Advance(10 * time.Second)
	require.Equal(t, result{sentAt: at(20)}, recv(done), "sent when the pause ends")
	require.NoError(t, p3.Done(Outcome{}))
}

// TestLaneAdmitPauseDuringPacing: a 429 pause that begins while an Admit
// waits for its pacing sends it back: it gives its pacing booking and its
// slot back and is sent when the pause ends, not at its booked time.
func TestLaneAdmitPauseDuringPacing(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(t0)
	lane, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 60, TPM: 6000, WarmUp: -1, Clock: clock}) // paced 1 s apart
	require.NoError(t, err)
	ctx := context.Background()
	req := Request{PromptTokens: 10, MaxOutputTokens: 10}
	p1, err := lane.Admit(ctx, req)
	require.NoError(t, err)
	type result struct {
		sentAt time.Time
		err    error
	}
	done := make(chan result, 1)
	go func() {
		p, err := lane.Admit(ctx, req)
		if err == nil {
			err = p.Done(Outcome{})
		}
		done <- result{p.SentAt(), err}
	}()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, clock.BlockUntilContext(wctx, 1), "paced until 1 s")
	require.Equal(t, 2, lane.Snapshot().InFlight, "holding its slot while paced")
	require.NoError(t, p1.DoneAt(t0, Outcome{RateLimited: true, Headers: RateLimitHeaders{RetryAfter: 3 * time.Second, HasRetryAfter: true}}))
	clock.Advance(time.Second)
	require.NoError(t, clock.BlockUntilContext(wctx, 1), "waiting out the pause")
	require.Equal(t, 0, lane.Snapshot().InFlight, "the slot went back")
	select {
	case r := <-done:
		t.Fatalf("sent during the pause: %+v", r)
	default:
	}
	clock.Advance(2 * time.Second)
	select {
	case r := <-done:
		require.Equal(t, result{sentAt: sec(3)}, r, "sent when the pause ends")
	case <-wctx.Done():
		t.Fatal("Admit did not return")
	}
}

// TestLaneAdmitBy: AdmitBy refuses at once, reserving nothing, a request
// the buckets or a 429 pause would hold past by; the earlier of by and
// ctx's deadline is the one reported; a concurrency slot is waited for
// past by.
func TestLaneAdmitBy(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(t0)
	lane, err := NewLane(LaneConfig{Name: "k/m", Strategy: StrategyShape, RPM: 60, TPM: 6000, Concurrency: 1, WarmUp: -1, MinInterval: -1, Clock: clock})
	require.NoError(t, err)
	ctx := context.Background()

	p1, err := lane.AdmitBy(ctx, Request{PromptTokens: 1000, MaxOutputTokens: 4000}, sec(2))
	require.NoError(t, err, "the buckets hold it: admitted at once")
	// 5000 of 6000 used: the next 2000 is ready 10 s later.
	_, err = lane.AdmitBy(ctx, Request{PromptTokens: 1000, MaxOutputTokens: 1000}, sec(2))
	require.Equal(t, &WaitError{Wait: 10 * time.Second, Deadline: sec(2)}, err)
	dl, cancel := context.WithDeadline(ctx, sec(1))
	defer cancel()
	_, err = lane.AdmitBy(dl, Request{PromptTokens: 1000, MaxOutputTokens: 1000}, sec(2))
	require.Equal(t, &WaitError{Wait: 10 * time.Second, Deadline: sec(1)}, err, "ctx's deadline first")
	require.InDelta(t, 1000, lane.Snapshot().Buckets[1].Level, 1e-9, "the refusals reserved nothing")

	// 1000 tokens fit the buckets now, but p1 holds the only slot: AdmitBy
	// waits for it past by, as long as ctx allows.
	done := make(chan error, 1)
	go func() {
		p, err := lane.AdmitBy(ctx, Request{PromptTokens: 500, MaxOutputTokens: 500}, sec(2))
		if err == nil {
			err = p.Done(Outcome{})
		}
		done <- err
	}()
	require.Eventually(t, func() bool { return lane.slots.Waiting() == 1 }, 5*time.Second, time.Millisecond, "waits for the slot")
	clock.Advance(3 * time.Second)
	require.Equal(t, 1, lane.slots.Waiting(), "still waits for the slot past by")
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	require.NoError(t, p1.Done(Outcome{}))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-wctx.Done():
		t.Fatal("not admitted when the slot came back")
	}
}
