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
