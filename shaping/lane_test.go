package shaping

import (
	"context"
	"sync"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

// TestLaneConcurrentAccess runs every entry point of lanes (one owning its
// buckets alone, two sharing a tenant quota) and of the shared bucket at
// once, for the race detector, and checks the exact ledger after: the clock
// stands still, so nothing refills and every cancel gives everything back;
// the headers say the server is full.
func TestLaneConcurrentAccess(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(t0)
	tenant, err := NewBucket(BucketConfig{Name: "tenant", Limit: 1e9}, t0)
	require.NoError(t, err)
	newLane := func(quotas ...Quota) *Lane {
		l, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 1e9, TPM: 1e9, WarmUp: -1, MinInterval: -1, Concurrency: 64, Quotas: quotas, Clock: clock})
		require.NoError(t, err)
		return l
	}
	own := newLane()
	a, b := newLane(Quota{Bucket: tenant, Unit: UnitTokens}), newLane(Quota{Bucket: tenant, Unit: UnitRequests})
	lanes := []*Lane{own, a, b}
	const goroutines, rounds = 6, 200
	req := Request{PromptTokens: 7, MaxOutputTokens: 3}
	var wg sync.WaitGroup
	for g := range goroutines {
		l := lanes[g%len(lanes)]
		wg.Go(func() {
			ctx := context.Background()
			huge := RateLimitHeaders{RemainingRequests: 1e18, HasRemainingRequests: true, RemainingTokens: 1e18, HasRemainingTokens: true}
			for i := range rounds {
				p, err := l.Admit(ctx, req)
				if err != nil {
					t.Error(err)
					return
				}
				r, err := l.ReserveAt(clock.Now(), req)
				if err != nil {
					t.Error(err)
					return
				}
				_ = l.ReadyAt(&r)
				l.CancelAt(clock.Now(), &r)
				l.ObserveAt(clock.Now(), huge)
				_ = l.Snapshot()
				_ = tenant.LevelAt(clock.Now())
				tenant.AdjustAt(clock.Now(), 0)
				if i%2 == 0 {
					p.Cancel()
				} else if err := p.Done(Outcome{PromptTokens: 7, CompletionTokens: 3, Headers: huge}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	settled := float64(goroutines / len(lanes) * rounds / 2) // per lane
	huge := RateLimitHeaders{RemainingRequests: 1e18, HasRemainingRequests: true, RemainingTokens: 1e18, HasRemainingTokens: true}
	for _, l := range lanes {
		s := l.Snapshot()
		require.Equal(t, uint64(goroutines/len(lanes)*rounds), s.Admitted)
		require.Equal(t, 0, s.InFlight)
		// The headers raised the levels, less what the lane had reserved
		// and not sent: with nothing left in its ledger, a last one fills
		// the buckets exactly.
		l.ObserveAt(clock.Now(), huge)
		s = l.Snapshot()
		require.Equal(t, 1e9, s.Buckets[0].Level)
		require.Equal(t, 1e9, s.Buckets[1].Level)
	}
	require.InDelta(t, 1e9-10*settled-settled, tenant.LevelAt(clock.Now()), 1e-6)
}
