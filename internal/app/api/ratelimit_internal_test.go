package api

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
)

// TestLimiterSetBounded: past its size a set forgets the least recently
// used name, so a flood of addresses costs bounded memory; looking a name
// up without create adds nothing.
func TestLimiterSetBounded(t *testing.T) {
	t.Parallel()
	s := newLimiterSet(60, 2)
	require.Nil(t, s.get("a", false))
	a := s.get("a", true)
	s.get("b", true)
	require.Same(t, a, s.get("a", false), "a is now the most recent")
	s.get("c", true)
	require.Equal(t, 2, s.lru.Len())
	require.Nil(t, s.get("b", false), "b, the least recent, was forgotten")
	require.Same(t, a, s.get("a", false))
	require.Nil(t, newLimiterSet(-1, 2).get("a", true), "-1: no limit")
}

// TestTake: a request takes a token of every limiter or of none, and
// learns the wait of the first without one.
func TestTake(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	key, tenant := rate.NewLimiter(1, 2), rate.NewLimiter(0.5, 1)
	i, wait := take(t0, key, tenant)
	require.Equal(t, -1, i)
	require.Zero(t, wait)
	i, wait = take(t0, key, tenant)
	require.Equal(t, 1, i, "the tenant's bucket is empty")
	require.Equal(t, 2*time.Second, wait)
	require.InDelta(t, 1, key.TokensAt(t0), 1e-9, "the key's token was given back")
	i, wait = take(t0, nil, nil)
	require.Equal(t, -1, i, "nil limiters limit nothing")
	require.Zero(t, wait)
	require.Equal(t, time.Second, throttled(t0.Add(time.Second), tenant), "throttled looks without taking")
	require.InDelta(t, 0.5, tenant.TokensAt(t0.Add(time.Second)), 1e-9)
}
