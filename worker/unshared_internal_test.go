package worker

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/shaping"
)

// A lane on share 0 (another replica holds a short bucket's whole quota)
// keeps a ticket for as long as a handover takes, then hands it back; the
// tickets after it go back at once, until the lane has a share again.
func TestUnsharedLaneHandsTicketsBack(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clock := clockwork.NewFakeClockAt(t0)
	shaper, err := shaping.NewLane(shaping.LaneConfig{Name: "m", Strategy: shaping.StrategyShape, RPM: 600, TPM: 60_000, Clock: clock})
	require.NoError(t, err)
	require.NoError(t, shaper.SetShare(0))
	w := &Worker{cfg: Config{Clock: clock, LedgerLease: 3 * time.Second, LedgerPeriod: 500 * time.Millisecond}}
	l := &lane{model: "m", shaper: shaper}
	ticket := func() *ticket {
		return &ticket{ctx: context.Background(), req: shaping.Request{PromptTokens: 100, MaxOutputTokens: 100}}
	}

	done := make(chan error, 1)
	go func() {
		_, err := w.admitTicket(l, ticket())
		done <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	clock.Advance(3499 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("handed back before a handover could give the lane a share: %v", err)
	default:
	}
	clock.Advance(time.Millisecond)
	select {
	case err := <-done:
		require.ErrorIs(t, err, errLaneUnshared)
	case <-ctx.Done():
		t.Fatal("the ticket was not handed back after the ledger's lease and period")
	}
	require.Equal(t, t0, l.unshared)

	// The next ticket goes back at once: the lane has been unshared long enough.
	go func() {
		_, err := w.admitTicket(l, ticket())
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, errLaneUnshared)
	case <-ctx.Done():
		t.Fatal("the next ticket waited again")
	}

	// With a share again the lane admits, and a later share 0 waits anew.
	require.NoError(t, shaper.SetShare(1))
	admitted := make(chan shaping.Permit, 1)
	go func() {
		p, err := w.admitTicket(l, ticket())
		done <- err
		admitted <- p
	}()
	for waiting := true; waiting; {
		select {
		case err := <-done:
			require.NoError(t, err)
			(<-admitted).Cancel()
			waiting = false
		case <-time.After(time.Millisecond):
			clock.Advance(100 * time.Millisecond) // the lane's first send waits for its probe's tokens
		case <-ctx.Done():
			t.Fatal("not admitted with a share")
		}
	}
	require.True(t, l.unshared.IsZero())
	require.NoError(t, shaper.SetShare(0))
	go func() {
		_, err := w.admitTicket(l, ticket())
		done <- err
	}()
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	select {
	case err := <-done:
		t.Fatalf("handed back at once after the share came back: %v", err)
	default:
	}
	clock.Advance(3500 * time.Millisecond)
	select {
	case err := <-done:
		require.ErrorIs(t, err, errLaneUnshared)
	case <-ctx.Done():
		t.Fatal("the ticket was not handed back")
	}
}

// A lane stalls jobs with a fallback when a pause or its buckets would
// hold them past FallbackMaxWait; on share 0 only a pause does: its
// buckets then hold them for the replica that holds the quota.
func TestStalledLane(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clock := clockwork.NewFakeClockAt(t0)
	shaper, err := shaping.NewLane(shaping.LaneConfig{Name: "m", Strategy: shaping.StrategyShape, RPM: 600, TPM: 60_000,
		ColdStart: shaping.ColdStartStatic, WarmUp: -1, MinInterval: -1, Clock: clock})
	require.NoError(t, err)
	w := &Worker{cfg: Config{Clock: clock, FallbackMaxWait: 2 * time.Second}}
	l := &lane{model: "m", shaper: shaper}
	doc := shaping.Request{PromptTokens: 1500, MaxOutputTokens: 500}
	first, err := shaper.Admit(context.Background(), doc)
	require.NoError(t, err)
	require.False(t, w.stalled(l, t0, doc), "29 more in the bucket")
	for range 30 {
		_, err := shaper.ReserveAt(t0, doc)
		require.NoError(t, err)
	}
	require.True(t, w.stalled(l, t0, doc), "in debt of 2,000: 2 s of refill pays it, none left for the next")
	require.False(t, w.stalled(l, t0.Add(2*time.Second), doc))
	require.NoError(t, shaper.SetShareAt(t0, 0))
	require.False(t, w.stalled(l, t0, doc), "share 0: the buckets hold it for the quota's holder")
	require.NoError(t, first.DoneAt(t0, shaping.Outcome{RateLimited: true,
		Headers: shaping.RateLimitHeaders{RetryAfter: 5 * time.Second, HasRetryAfter: true}}))
	require.True(t, w.stalled(l, t0, doc), "paused for 5 s, on share 0 too")
}
