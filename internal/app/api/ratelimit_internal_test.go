package api

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/llmq/llmq/store"
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

// TestLimiterSetShared: a set counts what it let through (its last minute
// by second) and takes from its buckets what the peers let through since
// last seen: a new peer's last minute, then the growth of its total; the
// debt stops at one bucket's size; names the replica does not know and
// peers gone add nothing.
func TestLimiterSetShared(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	s := newLimiterSet(60, 4)
	l := s.get("k", true)
	for i := range 3 {
		s.took("k", t0.Add(time.Duration(i)*30*time.Second))
	}
	s.took("unknown", t0) // no bucket: not counted
	counts := s.counts("key:", "me", t0.Add(70*time.Second))
	require.Equal(t, []store.DoorCount{{Name: "key:k", Replica: "me", Taken: 3, LastMinute: 2}}, counts,
		"the take at 0 s is over a minute old at 70 s")

	known := func(name string) bool { return name == "k" || name == "j" }
	now := t0.Add(time.Hour) // the bucket is full again: 60
	s.apply([]store.DoorCount{{Name: "k", Replica: "p", Taken: 500, LastMinute: 20}, {Name: "x", Replica: "p", Taken: 9, LastMinute: 9}}, now, known)
	require.InDelta(t, 40, l.TokensAt(now), 1e-9, "a new peer: its last minute")
	require.Nil(t, s.get("x", false), "a name not configured here adds no bucket")
	s.apply([]store.DoorCount{{Name: "k", Replica: "p", Taken: 530, LastMinute: 50}}, now, known)
	require.InDelta(t, 10, l.TokensAt(now), 1e-9, "then what it let through since")
	s.apply([]store.DoorCount{{Name: "k", Replica: "p", Taken: 730, LastMinute: 60}}, now, known)
	require.InDelta(t, -50, l.TokensAt(now), 1e-9, "a debt of one bucket's size at most")
	s.apply([]store.DoorCount{{Name: "k", Replica: "p", Taken: 760, LastMinute: 60}}, now, known)
	require.InDelta(t, -60, l.TokensAt(now), 1e-9)
	s.apply(nil, now, known)
	require.Empty(t, s.seen, "a peer gone is forgotten")
	s.apply([]store.DoorCount{{Name: "j", Replica: "q", Taken: 5, LastMinute: 5}}, now, known)
	require.InDelta(t, 55, s.get("j", false).TokensAt(now), 1e-9, "a name known here gets its bucket")
	// A key kept as data is not configured, but once this replica has let
	// it through, its bucket takes the others' share too.
	d := s.get("data", true)
	s.apply([]store.DoorCount{{Name: "data", Replica: "q", Taken: 7, LastMinute: 7}}, now, known)
	require.InDelta(t, 53, d.TokensAt(now), 1e-9, "a name with a bucket here is shared")
}
