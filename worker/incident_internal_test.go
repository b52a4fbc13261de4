package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// newTestIncident is a breaker of 4 calls, half failed, over a minute,
// probing every 15 s, that records the incidents it reports.
func newTestIncident(reported *[]incidentCause) *incident {
	return &incident{minCalls: 4, ratio: 0.5, window: time.Minute, probeEvery: 15 * time.Second, wake: make(chan struct{}),
		change: func(c incidentChange) {
			if c.report {
				*reported = append(*reported, c.cause)
			}
		}}
}

// TestIncidentUnreachable: one call that reaches no one holds the lane and
// the next call probes at once; when that probe fails too the outage is
// reported and the lane probes every 15 s until a probe is answered.
// Every failure of the outage is held, with the time since it began.
func TestIncidentUnreachable(t *testing.T) {
	t.Parallel()
	var reported []incidentCause
	b := newTestIncident(&reported)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

	ok, probe, _, _ := b.allow(t0)
	require.True(t, ok)
	require.False(t, probe)
	held, lasted := b.done(t0, false, resultUnreachable)
	require.True(t, held)
	require.Zero(t, lasted)
	require.Empty(t, reported, "one connection failure is not yet an outage")

	ok, probe, _, _ = b.allow(t0.Add(time.Millisecond))
	require.True(t, ok)
	require.True(t, probe, "the next call probes at once")
	ok, _, wait, wake := b.allow(t0.Add(time.Millisecond))
	require.False(t, ok, "one probe at a time")
	require.Zero(t, wait)
	held, lasted = b.done(t0.Add(time.Second), false, resultUnreachable)
	require.True(t, held, "a call admitted before the hold, failing for the outage")
	require.Equal(t, time.Second, lasted)
	held, lasted = b.done(t0.Add(2*time.Second), true, resultUnreachable)
	require.True(t, held)
	require.Equal(t, 2*time.Second, lasted)
	require.Equal(t, []incidentCause{causeUnreachable}, reported)
	select {
	case <-wake:
	default:
		t.Fatal("the waiting dispatcher is woken when the probe ends")
	}

	ok, _, wait, _ = b.allow(t0.Add(3 * time.Second))
	require.False(t, ok)
	require.Equal(t, 14*time.Second, wait)
	ok, probe, _, _ = b.allow(t0.Add(17 * time.Second))
	require.True(t, ok)
	require.True(t, probe)
	b.notCalled(true)
	ok, probe, _, _ = b.allow(t0.Add(17 * time.Second))
	require.True(t, ok && probe, "a probe not made leaves the next call to probe")
	held, _ = b.done(t0.Add(18*time.Second), false, resultAnswered)
	require.False(t, held)
	require.Equal(t, incidentProbing, b.state, "an answer to a call admitted before the hold says nothing new")
	held, _ = b.done(t0.Add(18*time.Second), true, resultAnswered)
	require.False(t, held)
	ok, probe, _, _ = b.allow(t0.Add(18 * time.Second))
	require.True(t, ok)
	require.False(t, probe, "closed")
	require.Equal(t, []incidentCause{causeUnreachable}, reported, "reported once")
}

// TestIncidentUnauthorized: one 401 holds the lane and is reported at
// once, once per incident; its calls are held until a probe is answered.
func TestIncidentUnauthorized(t *testing.T) {
	t.Parallel()
	var reported []incidentCause
	b := newTestIncident(&reported)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	held, _ := b.done(t0, false, resultUnauthorized)
	require.True(t, held)
	require.Equal(t, []incidentCause{causeUnauthorized}, reported)
	ok, _, wait, _ := b.allow(t0)
	require.False(t, ok)
	require.Equal(t, 15*time.Second, wait)
	for i := 1; i <= 3; i++ {
		at := t0.Add(time.Duration(i) * 15 * time.Second)
		ok, probe, _, _ := b.allow(at)
		require.True(t, ok && probe)
		held, lasted := b.done(at, true, resultUnauthorized)
		require.True(t, held)
		require.Equal(t, at.Sub(t0), lasted)
	}
	require.Equal(t, []incidentCause{causeUnauthorized}, reported, "once per incident")
	ok, probe, _, _ := b.allow(t0.Add(time.Minute))
	require.True(t, ok && probe)
	b.done(t0.Add(time.Minute), true, resultAnswered)
	held, _ = b.done(t0.Add(2*time.Minute), false, resultUnauthorized)
	require.True(t, held)
	require.Equal(t, []incidentCause{causeUnauthorized, causeUnauthorized}, reported, "a new incident")
}

// TestIncidentFailureRatio: 5xx answers hold the lane once the window
// holds minCalls calls, ratio of them failed; calls that failed before are
// not the incident's (not held), the failed probes are.
func TestIncidentFailureRatio(t *testing.T) {
	t.Parallel()
	var reported []incidentCause
	b := newTestIncident(&reported)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	b.done(t0, false, resultFailed)
	b.done(t0.Add(time.Second), false, resultFailed)
	held, _ := b.done(t0.Add(2*time.Second), false, resultFailed)
	require.False(t, held)
	require.Equal(t, incidentClosed, b.state, "3 calls: fewer than minCalls")
	// Those three leave the window.
	b.done(t0.Add(70*time.Second), false, resultFailed)
	b.done(t0.Add(71*time.Second), false, resultAnswered)
	b.done(t0.Add(72*time.Second), false, resultAnswered)
	require.Equal(t, incidentClosed, b.state, "3 calls in the window")
	held, _ = b.done(t0.Add(73*time.Second), false, resultFailed)
	require.False(t, held, "the failure that trips the breaker was counted before")
	require.Equal(t, incidentOpen, b.state, "4 calls, 2 failed")
	require.Equal(t, []incidentCause{causeFailures}, reported)
	ok, probe, _, _ := b.allow(t0.Add(88 * time.Second))
	require.True(t, ok && probe)
	held, lasted := b.done(t0.Add(89*time.Second), true, resultFailed)
	require.True(t, held)
	require.Equal(t, 16*time.Second, lasted)
}
