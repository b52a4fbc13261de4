package shaping

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

func TestHeadroomAt(t *testing.T) {
	t.Parallel()
	typical := Request{PromptTokens: 200, MaxOutputTokens: 800} // 1,000 tokens
	newLane := func(c LaneConfig) *Lane {
		c.Clock = clockwork.NewFakeClockAt(t0)
		if c.WarmUp == 0 {
			c.WarmUp = -1
		}
		if c.MinInterval == 0 {
			c.MinInterval = -1
		}
		l, err := NewLane(c)
		require.NoError(t, err)
		return l
	}

	// RPM binds: a full bucket of 60 plus one refilled in the second.
	l := newLane(LaneConfig{Strategy: StrategyShape, RPM: 60, TPM: 1e9, Concurrency: 1000})
	require.Equal(t, 61, l.HeadroomAt(t0, time.Second, typical))
	require.Equal(t, 60, l.HeadroomAt(t0, 0, typical))
	for range 60 {
		_, err := l.ReserveAt(t0, typical)
		require.NoError(t, err)
	}
	require.Equal(t, 1, l.HeadroomAt(t0, time.Second, typical), "what is reserved is gone")
	require.Equal(t, 0, l.HeadroomAt(t0, 500*time.Millisecond, typical))
	_, err := l.ReserveAt(t0, typical)
	require.NoError(t, err)
	require.Equal(t, 0, l.HeadroomAt(t0, time.Second, typical), "in debt")
	require.Equal(t, 1, l.HeadroomAt(t0.Add(time.Second), time.Second, typical), "the debt refilled")

	// TPM binds: 60,000 tokens is 60 typical requests, plus 1,000 tokens a
	// second; a larger request counts for more.
	l = newLane(LaneConfig{Strategy: StrategyShape, RPM: 1e9, TPM: 60000, Concurrency: 1000})
	require.Equal(t, 61, l.HeadroomAt(t0, time.Second, typical))
	require.Equal(t, 30, l.HeadroomAt(t0, 0, Request{PromptTokens: 1000, MaxOutputTokens: 1000}))
	require.Equal(t, 1, l.HeadroomAt(t0, 0, Request{PromptTokens: 1e6}), "a request larger than the bucket counts as the bucket")
	require.Equal(t, 49, l.HeadroomAt(t0, 0, Request{PromptTokens: 200}), "no max output: the default (1,024) is reserved: 60,000 / 1,224")

	// Concurrency binds: slots in flight and waiting are taken.
	l = newLane(LaneConfig{Strategy: StrategyShape, RPM: 1e9, TPM: 1e9, Concurrency: 4})
	require.Equal(t, 4, l.HeadroomAt(t0, time.Second, typical))
	p, err := l.Admit(context.Background(), typical)
	require.NoError(t, err)
	require.Equal(t, 3, l.HeadroomAt(t0, time.Second, typical))
	p.Cancel()
	require.Equal(t, 4, l.HeadroomAt(t0, time.Second, typical))

	// A pause by 429s: none while it lasts past the horizon.
	p, err = l.Admit(context.Background(), typical)
	require.NoError(t, err)
	require.NoError(t, p.DoneAt(t0, Outcome{RateLimited: true, Headers: RateLimitHeaders{RetryAfter: 5 * time.Second, HasRetryAfter: true}}))
	require.Equal(t, 0, l.HeadroomAt(t0, time.Second, typical))
	require.Equal(t, 4, l.HeadroomAt(t0.Add(4500*time.Millisecond), time.Second, typical), "the pause ends within the horizon")

	// The pacer: one send a second allows two in a second from now.
	l = newLane(LaneConfig{Strategy: StrategyShape, RPM: 1e9, TPM: 1e9, Concurrency: 100, MinInterval: time.Second})
	require.Equal(t, 2, l.HeadroomAt(t0, time.Second, typical))

	// A quota shared with other lanes binds too.
	tenant, err := NewBucket(BucketConfig{Name: "tenant", Limit: 3}, t0)
	require.NoError(t, err)
	l = newLane(LaneConfig{Strategy: StrategyShape, RPM: 1e9, TPM: 1e9, Concurrency: 100, Quotas: []Quota{{Bucket: tenant}}})
	require.Equal(t, 3, l.HeadroomAt(t0, time.Second, typical))
	require.Equal(t, 1, l.HeadroomAt(t0, time.Second, Request{Quotas: []Quota{{Bucket: tenant, Unit: UnitTokens}}}),
		"a token quota of 3 holds no request of 1,024 tokens but counts as one bucketful")

	// Unknown quotas (strategy retry): only the concurrency, unbounded.
	l = newLane(LaneConfig{Strategy: StrategyRetry})
	require.Equal(t, math.MaxInt32, l.HeadroomAt(t0, time.Second, typical))
}

// TestHeadroomCountsWaiters: a request waiting for a concurrency slot
// takes the next one that frees, so while one waits the lane has no
// headroom, and none appears until a slot frees with nobody waiting.
func TestHeadroomCountsWaiters(t *testing.T) {
	t.Parallel()
	typical := Request{PromptTokens: 10, MaxOutputTokens: 10}
	l, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 1e6, TPM: 1e9, Concurrency: 2,
		WarmUp: -1, MinInterval: -1, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	var permits []Permit
	for range 2 {
		p, err := l.Admit(context.Background(), typical)
		require.NoError(t, err)
		permits = append(permits, p)
	}
	require.Equal(t, 0, l.HeadroomAt(t0, time.Second, typical))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waiter := make(chan Permit, 1)
	go func() {
		if p, err := l.Admit(ctx, typical); err == nil {
			waiter <- p
		}
	}()
	require.Eventually(t, func() bool { return l.SnapshotAt(t0).Waiting == 1 }, 5*time.Second, time.Millisecond)
	require.Equal(t, 0, l.HeadroomAt(t0, time.Second, typical), "the waiter takes the next slot")

	permits[0].Cancel()
	var third Permit
	select {
	case third = <-waiter:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not get the freed slot")
	}
	require.Equal(t, 0, l.HeadroomAt(t0, time.Second, typical))
	permits[1].Cancel()
	require.Equal(t, 1, l.HeadroomAt(t0, time.Second, typical))
	third.Cancel()
	require.Equal(t, 2, l.HeadroomAt(t0, time.Second, typical))
}

// TestTokenRoomAt: the tokens the lane's buckets hold, bounded while a
// token bucket is short of full, unbounded when every one is full (waiting
// would add nothing) or none binds.
func TestTokenRoomAt(t *testing.T) {
	t.Parallel()
	newLane := func(c LaneConfig) *Lane {
		c.Clock = clockwork.NewFakeClockAt(t0)
		c.WarmUp, c.MinInterval = -1, -1
		l, err := NewLane(c)
		require.NoError(t, err)
		return l
	}
	doc := Request{PromptTokens: 1500, MaxOutputTokens: 500} // 2,000 tokens

	l := newLane(LaneConfig{Strategy: StrategyShape, RPM: 1e6, TPM: 60000, Concurrency: 1000})
	_, bounded := l.TokenRoomAt(t0)
	require.False(t, bounded, "a full bucket: the lane holds what is larger than the room")
	_, err := l.ReserveAt(t0, doc)
	require.NoError(t, err)
	room, bounded := l.TokenRoomAt(t0)
	require.True(t, bounded)
	require.InDelta(t, 58000, room, 1e-6)
	for range 29 {
		_, err := l.ReserveAt(t0, doc)
		require.NoError(t, err)
	}
	room, _ = l.TokenRoomAt(t0)
	require.Zero(t, room, "the bucket spent")
	room, _ = l.TokenRoomAt(t0.Add(1500 * time.Millisecond))
	require.InDelta(t, 1500, room, 1e-6, "what 1.5 s refilled")
	_, err = l.ReserveAt(t0, doc)
	require.NoError(t, err)
	room, bounded = l.TokenRoomAt(t0.Add(time.Second))
	require.True(t, bounded)
	require.Zero(t, room, "in debt: none (never negative)")
	room, _ = l.TokenRoomAt(t0.Add(3 * time.Second))
	require.InDelta(t, 1000, room, 1e-6, "3 s refilled the debt of 2,000 and 1,000 more")
	_, bounded = l.TokenRoomAt(t0.Add(62 * time.Second))
	require.False(t, bounded, "refilled to full")

	// A token quota of the lane binds too, and bounds while it is short.
	org, err := NewBucket(BucketConfig{Name: "org", Limit: 6000}, t0)
	require.NoError(t, err)
	l = newLane(LaneConfig{Strategy: StrategyShape, RPM: 1e6, TPM: 60000, Concurrency: 1000,
		Quotas: []Quota{{Bucket: org, Unit: UnitTokens}}})
	_, err = l.ReserveAt(t0, doc)
	require.NoError(t, err)
	room, bounded = l.TokenRoomAt(t0)
	require.True(t, bounded)
	require.InDelta(t, 4000, room, 1e-6, "the quota's 4,000 left")

	// Unknown quotas (strategy retry): unbounded.
	_, bounded = newLane(LaneConfig{Strategy: StrategyRetry}).TokenRoomAt(t0)
	require.False(t, bounded)
}

// TestHeldAt: a lane holds a request past a wait when its buckets cannot
// admit it by then, or a pause lasts past it; its concurrency aside.
func TestHeldAt(t *testing.T) {
	t.Parallel()
	doc := Request{PromptTokens: 1500, MaxOutputTokens: 500} // 2,000 tokens
	l, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 1e6, TPM: 60000, Concurrency: 1,
		WarmUp: -1, MinInterval: -1, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	p, err := l.Admit(context.Background(), doc)
	require.NoError(t, err)
	require.False(t, l.HeldAt(t0, 0, doc), "its one slot taken: concurrency aside")
	for range 29 {
		_, err := l.ReserveAt(t0, doc)
		require.NoError(t, err)
	}
	require.True(t, l.HeldAt(t0, time.Second, doc), "the bucket spent: a second refills half of it")
	require.False(t, l.HeldAt(t0, 2*time.Second, doc))
	require.NoError(t, p.DoneAt(t0, Outcome{RateLimited: true, Headers: RateLimitHeaders{RetryAfter: 5 * time.Second, HasRetryAfter: true}}))
	require.True(t, l.HeldAt(t0, 4*time.Second, doc), "paused for 5 s")
	require.False(t, l.HeldAt(t0, 6*time.Second, doc))

	retry, err := NewLane(LaneConfig{Strategy: StrategyRetry, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	require.False(t, retry.HeldAt(t0, 0, doc))
}
