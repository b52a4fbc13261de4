package shaping

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestQuotaBucketPeek: ReadyFor and HeadroomAt say what a reservation
// would get, and take nothing.
func TestQuotaBucketPeek(t *testing.T) {
	t.Parallel()
	b, err := NewBucket(BucketConfig{Name: "tenant:a", Limit: 600}, t0) // 10 a second, full
	require.NoError(t, err)
	at, err := b.ReadyFor(t0, 600)
	require.NoError(t, err)
	require.Equal(t, t0, at)
	require.Equal(t, 6, b.HeadroomAt(t0, 0, 100))
	require.Equal(t, 7, b.HeadroomAt(t0, 10*time.Second, 100), "600 now and 100 of refill")
	_, err = b.ReserveAt(t0, 550)
	require.NoError(t, err)
	at, err = b.ReadyFor(t0, 100)
	require.NoError(t, err)
	require.Equal(t, sec(5), at, "50 left, 50 more in 5 s")
	require.InDelta(t, 50, b.LevelAt(t0), 1e-9, "peeking takes nothing")
	_, err = b.ReadyFor(t0, 601)
	require.ErrorIs(t, err, ErrTooLarge)
}

// TestQuotaBucketShare: on a share, the refill and capacity shrink, and
// a request above the share's capacity (but within the quota) waits for a
// full bucket instead of failing.
func TestQuotaBucketShare(t *testing.T) {
	t.Parallel()
	b, err := NewBucket(BucketConfig{Name: "tenant:a", Limit: 600}, t0)
	require.NoError(t, err)
	require.NoError(t, b.ShareAt(t0, 600, 0.5))
	require.InDelta(t, 300, b.Capacity(), 1e-9)
	require.InDelta(t, 300, b.Limit(), 1e-9)
	require.InDelta(t, 300, b.LevelAt(t0), 1e-9, "a level above the capacity is cut")
	c, err := b.ReserveAt(t0, 400)
	require.NoError(t, err, "above the share, within the quota")
	require.Equal(t, t0, c.ReadyAt, "a full bucket sends it")
	require.InDelta(t, -100, b.LevelAt(t0), 1e-9)
	at, err := b.ReadyFor(t0, 1)
	require.NoError(t, err)
	require.Equal(t, sec(20.2), at, "101 tokens at 5 a second")
	require.Error(t, b.ShareAt(t0, 600, 0))
	require.Error(t, b.ShareAt(t0, 0, 0.5), "a limit of 0")
	require.NoError(t, b.ShareAt(t0, 600, 1))
	require.InDelta(t, 600, b.Capacity(), 1e-9)
}
