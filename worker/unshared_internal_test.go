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
	ls := &laneSet{cfg: laneSetConfig{Clock: clock, LedgerLease: 3 * time.Second, LedgerPeriod: 500 * time.Millisecond}}
	l := &lane{model: "m", shaper: shaper}
	ticket := func() *ticket {
		return &ticket{ctx: context.Background(), req: shaping.Request{PromptTokens: 100, MaxOutputTokens: 100}}
	}

	done := make(chan error, 1)
	go func() {
		_, err := ls.admitTicket(l, ticket())
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
		_, err := ls.admitTicket(l, ticket())
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
		p, err := ls.admitTicket(l, ticket())
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
		_, err := ls.admitTicket(l, ticket())
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
