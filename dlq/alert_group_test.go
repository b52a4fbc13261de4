package dlq

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)

func testGrouper(t *testing.T, cfg AlertConfig) *grouper {
	t.Helper()
	cfg.WebhookURL = "http://127.0.0.1:1/hook"
	cfg = cfg.WithDefaults()
	require.NoError(t, cfg.validate())
	return newGrouper(cfg)
}

func deadLetter(id, tenant string, reason Reason) Event {
	return Event{JobID: id, Tenant: tenant, Reason: reason, LastError: "429 Too Many Requests", Model: "gpt-4o-mini", Time: t0}
}

func TestGrouperBurstFiresOnceThenResolves(t *testing.T) {
	t.Parallel()
	g := testGrouper(t, AlertConfig{})
	for i := range 100 {
		g.add(deadLetter(fmt.Sprintf("job-%03d", i), "acme", ReasonRetriesExhausted), t0.Add(time.Duration(i)*time.Millisecond))
	}
	require.Equal(t, t0.Add(AlertGroupWaitDefault), g.next())
	require.Empty(t, g.due(t0.Add(AlertGroupWaitDefault-time.Nanosecond)))

	fired := g.due(t0.Add(AlertGroupWaitDefault))
	require.Equal(t, []notification{{
		State:     stateFiring,
		Reason:    ReasonRetriesExhausted,
		Tenant:    "acme",
		Count:     100,
		SampleIDs: []string{"job-095", "job-096", "job-097", "job-098", "job-099"},
		Models:    []string{"gpt-4o-mini"},
		LastError: "429 Too Many Requests",
		FirstAt:   t0,
		LastAt:    t0,
		StartsAt:  t0,
		EndsAt:    t0.Add(99*time.Millisecond + AlertResolveTimeoutDefault + AlertGroupIntervalDefault),
	}}, fired)

	resolveAt := t0.Add(99*time.Millisecond + AlertResolveTimeoutDefault)
	require.Equal(t, resolveAt, g.next())
	require.Empty(t, g.due(resolveAt.Add(-time.Nanosecond)))
	resolved := g.due(resolveAt)
	require.Len(t, resolved, 1)
	require.Equal(t, stateResolved, resolved[0].State)
	require.Equal(t, 100, resolved[0].Count)
	require.Equal(t, t0, resolved[0].StartsAt)
	require.Equal(t, resolveAt, resolved[0].EndsAt)
	require.True(t, g.next().IsZero())
	require.Empty(t, g.groups)
}

func TestGrouperUpdatesAtGroupInterval(t *testing.T) {
	t.Parallel()
	g := testGrouper(t, AlertConfig{})
	g.add(deadLetter("a", "acme", ReasonPoison), t0)
	require.Len(t, g.due(t0.Add(10*time.Second)), 1)

	// Events during the burst are held until GroupInterval after the first
	// notification.
	g.add(deadLetter("b", "acme", ReasonPoison), t0.Add(time.Minute))
	g.add(deadLetter("c", "acme", ReasonPoison), t0.Add(2*time.Minute))
	update := t0.Add(10*time.Second + 5*time.Minute)
	require.Equal(t, update, g.next())
	require.Empty(t, g.due(update.Add(-time.Nanosecond)))
	ns := g.due(update)
	require.Len(t, ns, 1)
	require.Equal(t, stateFiring, ns[0].State)
	require.Equal(t, 3, ns[0].Count)
	require.Equal(t, []string{"a", "b", "c"}, ns[0].SampleIDs)
	require.Equal(t, t0, ns[0].StartsAt)

	// Quiet since 2m: resolved at 7m.
	require.Equal(t, t0.Add(7*time.Minute), g.next())
	ns = g.due(t0.Add(7 * time.Minute))
	require.Len(t, ns, 1)
	require.Equal(t, stateResolved, ns[0].State)
	require.Equal(t, 3, ns[0].Count)

	// The next event opens a new burst.
	g.add(deadLetter("d", "acme", ReasonPoison), t0.Add(8*time.Minute))
	ns = g.due(t0.Add(8*time.Minute + 10*time.Second))
	require.Len(t, ns, 1)
	require.Equal(t, stateFiring, ns[0].State)
	require.Equal(t, 1, ns[0].Count)
	require.Equal(t, t0.Add(8*time.Minute), ns[0].StartsAt)
}

func TestGrouperResolvesWhenQuietBeforeUpdate(t *testing.T) {
	t.Parallel()
	// GroupInterval longer than ResolveTimeout: the unreported events go
	// into the resolved notification.
	g := testGrouper(t, AlertConfig{GroupInterval: time.Hour})
	g.add(deadLetter("a", "acme", ReasonPoison), t0)
	require.Len(t, g.due(t0.Add(10*time.Second)), 1)
	g.add(deadLetter("b", "acme", ReasonPoison), t0.Add(time.Minute))
	require.Equal(t, t0.Add(6*time.Minute), g.next())
	ns := g.due(t0.Add(6 * time.Minute))
	require.Len(t, ns, 1)
	require.Equal(t, stateResolved, ns[0].State)
	require.Equal(t, 2, ns[0].Count)
}

func TestGrouperGroupsByReasonAndTenant(t *testing.T) {
	t.Parallel()
	g := testGrouper(t, AlertConfig{})
	for i := range 30 {
		g.add(deadLetter(fmt.Sprint("p", i), "acme", ReasonPoison), t0)
		g.add(deadLetter(fmt.Sprint("e", i), "acme", ReasonExpired), t0)
		g.add(deadLetter(fmt.Sprint("q", i), "beta", ReasonPoison), t0)
	}
	g.add(Event{JobID: "x"}, t0)
	ns := g.due(t0.Add(10 * time.Second))
	var got []string
	for _, n := range ns {
		got = append(got, fmt.Sprintf("%s/%s/%d", n.Reason, n.Tenant, n.Count))
	}
	require.Equal(t, []string{"expired/acme/30", "poison/acme/30", "poison/beta/30", "unknown/default/1"}, got)
}

func TestGrouperRateLimit(t *testing.T) {
	t.Parallel()
	g := testGrouper(t, AlertConfig{MaxPerMinute: 2})
	for _, tenant := range []string{"a", "b", "c"} {
		g.add(deadLetter("j-"+tenant, tenant, ReasonPoison), t0)
	}
	ns := g.due(t0.Add(10 * time.Second))
	require.Len(t, ns, 2)
	require.Equal(t, []string{"a", "b"}, []string{ns[0].Tenant, ns[1].Tenant})

	// The third waits for room in the window, then goes out with what
	// arrived meanwhile.
	g.add(deadLetter("j-c2", "c", ReasonPoison), t0.Add(30*time.Second))
	free := t0.Add(10*time.Second + time.Minute)
	require.Equal(t, free, g.next())
	require.Empty(t, g.due(free.Add(-time.Nanosecond)))
	ns = g.due(free)
	require.Len(t, ns, 1)
	require.Equal(t, "c", ns[0].Tenant)
	require.Equal(t, 2, ns[0].Count)
}

func TestGrouperUnlimitedRate(t *testing.T) {
	t.Parallel()
	g := testGrouper(t, AlertConfig{MaxPerMinute: -1})
	for i := range 50 {
		g.add(deadLetter("j", fmt.Sprint("t", i), ReasonPoison), t0)
	}
	require.Len(t, g.due(t0.Add(10*time.Second)), 50)
}

func TestGrouperFlush(t *testing.T) {
	t.Parallel()
	g := testGrouper(t, AlertConfig{})
	g.add(deadLetter("a", "acme", ReasonPoison), t0)
	g.add(deadLetter("b", "beta", ReasonPoison), t0)
	require.Len(t, g.due(t0.Add(10*time.Second)), 2)
	g.add(deadLetter("c", "beta", ReasonPoison), t0.Add(20*time.Second))
	g.add(deadLetter("d", "acme", ReasonExpired), t0.Add(20*time.Second))

	// Only bursts with unreported events, at once, as firing.
	ns := g.flush(t0.Add(21 * time.Second))
	require.Len(t, ns, 2)
	require.Equal(t, [2]string{"expired", "acme"}, [2]string{string(ns[0].Reason), ns[0].Tenant})
	require.Equal(t, [2]string{"poison", "beta"}, [2]string{string(ns[1].Reason), ns[1].Tenant})
	require.Equal(t, 2, ns[1].Count)
	require.Equal(t, stateFiring, ns[1].State)
}

func TestWindow(t *testing.T) {
	t.Parallel()
	w := window{max: 2, span: time.Minute}
	require.True(t, w.nextFree().IsZero())
	require.True(t, w.allow(t0))
	require.True(t, w.allow(t0.Add(time.Second)))
	require.False(t, w.allow(t0.Add(59*time.Second)))
	require.Equal(t, t0.Add(time.Minute), w.nextFree())
	require.True(t, w.allow(t0.Add(time.Minute)))
	require.False(t, w.allow(t0.Add(time.Minute)))
	require.Equal(t, t0.Add(time.Minute+time.Second), w.nextFree())
}
