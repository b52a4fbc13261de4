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

// requireClosed fails unless wake was closed: the waiting dispatcher is
// woken.
func requireClosed(t *testing.T, wake <-chan struct{}) {
	t.Helper()
	select {
	case <-wake:
	default:
		t.Fatal("the waiting dispatcher is not woken")
	}
}

// TestIncidentUnreachable: a call that reaches no one puts the lane in
// doubt (one call at a time until one is answered); three in a row hold
// the lane and the next call probes at once; when that probe fails too the
// outage is reported and the lane probes every 15 s until a probe is
// answered. Every call that got no answer is the outage's, with the time
// since the first of the row.
func TestIncidentUnreachable(t *testing.T) {
	t.Parallel()
	var reported []incidentCause
	b := newTestIncident(&reported)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }

	outage, lasted := b.done(t0, false, resultUnreachable)
	require.True(t, outage)
	require.Zero(t, lasted)
	ok, probe, _, _ := b.allow(t0)
	require.True(t, ok && probe, "in doubt: one call at a time")
	ok, _, wait, wake := b.allow(t0)
	require.False(t, ok)
	require.Zero(t, wait, "until a call ends")
	b.done(t0, false, resultAnswered)
	ok, _, _, _ = b.allow(t0)
	require.False(t, ok, "an answer to a call begun before the doubt does not end it")
	b.done(at(time.Millisecond), true, resultAnswered) // a dropped connection, now and then
	requireClosed(t, wake)
	ok, probe, _, _ = b.allow(at(time.Millisecond))
	require.True(t, ok)
	require.False(t, probe, "answered: no doubt")

	for i := 1; i <= 2; i++ {
		outage, lasted = b.done(at(time.Duration(i)*time.Second), i == 2, resultUnreachable)
		require.True(t, outage)
		require.Equal(t, time.Duration(i-1)*time.Second, lasted)
		ok, probe, _, _ := b.allow(at(time.Duration(i) * time.Second))
		require.True(t, ok && probe, "two in a row: in doubt, not held")
	}
	outage, lasted = b.done(at(3*time.Second), false, resultUnreachable)
	require.True(t, outage)
	require.Equal(t, 2*time.Second, lasted)
	require.Empty(t, reported, "not yet reported")
	require.Equal(t, incidentOpen, b.state)

	ok, probe, _, _ = b.allow(at(3 * time.Second))
	require.True(t, ok)
	require.True(t, probe, "the next call probes at once")
	ok, _, wait, wake = b.allow(at(3 * time.Second))
	require.False(t, ok, "one probe at a time")
	require.Zero(t, wait)
	outage, lasted = b.done(at(4*time.Second), false, resultUnreachable)
	require.True(t, outage, "a call admitted before the hold, failing for the outage")
	require.Equal(t, 3*time.Second, lasted)
	outage, lasted = b.done(at(5*time.Second), true, resultUnreachable)
	require.True(t, outage)
	require.Equal(t, 4*time.Second, lasted)
	require.Equal(t, []incidentCause{causeUnreachable}, reported)
	requireClosed(t, wake)

	ok, _, wait, _ = b.allow(at(6 * time.Second))
	require.False(t, ok)
	require.Equal(t, 14*time.Second, wait)
	ok, probe, _, _ = b.allow(at(20 * time.Second))
	require.True(t, ok)
	require.True(t, probe)
	b.notCalled(true)
	ok, probe, _, _ = b.allow(at(20 * time.Second))
	require.True(t, ok && probe, "a probe not made leaves the next call to probe")
	outage, _ = b.done(at(21*time.Second), false, resultAnswered)
	require.False(t, outage)
	require.Equal(t, incidentProbing, b.state, "an answer to a call admitted before the hold says nothing new")
	outage, _ = b.done(at(21*time.Second), true, resultAnswered)
	require.False(t, outage)
	ok, probe, _, _ = b.allow(at(21 * time.Second))
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
	outage, _ := b.done(t0, false, resultUnauthorized)
	require.True(t, outage)
	require.Equal(t, []incidentCause{causeUnauthorized}, reported)
	ok, _, wait, _ := b.allow(t0)
	require.False(t, ok)
	require.Equal(t, 15*time.Second, wait)
	for i := 1; i <= 3; i++ {
		at := t0.Add(time.Duration(i) * 15 * time.Second)
		ok, probe, _, _ := b.allow(at)
		require.True(t, ok && probe)
		outage, lasted := b.done(at, true, resultUnauthorized)
		require.True(t, outage)
		require.Equal(t, at.Sub(t0), lasted)
	}
	require.Equal(t, []incidentCause{causeUnauthorized}, reported, "once per incident")
	ok, probe, _, _ := b.allow(t0.Add(time.Minute))
	require.True(t, ok && probe)
	b.done(t0.Add(time.Minute), true, resultAnswered)
	outage, _ = b.done(t0.Add(2*time.Minute), false, resultUnauthorized)
	require.True(t, outage)
	require.Equal(t, []incidentCause{causeUnauthorized, causeUnauthorized}, reported, "a new incident")
}

// TestIncidentFailureRatio: 5xx answers hold the lane once the window
// holds minCalls calls, ratio of them failed; calls that failed before are
// not the incident's (they count), the failed probes are.
func TestIncidentFailureRatio(t *testing.T) {
	t.Parallel()
	var reported []incidentCause
	b := newTestIncident(&reported)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	b.done(t0, false, resultFailed)
	b.done(t0.Add(time.Second), false, resultFailed)
	outage, _ := b.done(t0.Add(2*time.Second), false, resultFailed)
	require.False(t, outage)
	require.Equal(t, incidentClosed, b.state, "3 calls: fewer than minCalls")
	// Those three leave the window.
	b.done(t0.Add(70*time.Second), false, resultFailed)
	b.done(t0.Add(71*time.Second), false, resultAnswered)
	b.done(t0.Add(72*time.Second), false, resultAnswered)
	require.Equal(t, incidentClosed, b.state, "3 calls in the window")
	outage, _ = b.done(t0.Add(73*time.Second), false, resultFailed)
	require.False(t, outage, "the failure that trips the breaker was counted before")
	require.Equal(t, incidentOpen, b.state, "4 calls, 2 failed")
	require.Equal(t, []incidentCause{causeFailures}, reported)
	ok, probe, _, _ := b.allow(t0.Add(88 * time.Second))
	require.True(t, ok && probe)
	outage, lasted := b.done(t0.Add(89*time.Second), true, resultFailed)
	require.True(t, outage)
	require.Equal(t, 16*time.Second, lasted)
}

// TestResultOf: what each outcome tells the breaker.
func TestResultOf(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		out  Outcome
		want callResult
	}{
		{Outcome{Class: ClassSuccess, Status: 200}, resultAnswered},
		{Outcome{Class: ClassRateLimited, Status: 429}, resultAnswered},
		{Outcome{Class: ClassPermanent, Status: 400}, resultAnswered},
		{Outcome{Class: ClassPermanent, Status: 404, Code: "model_not_found"}, resultAnswered},
		{Outcome{Class: ClassPermanent, Status: 401, Code: "invalid_api_key"}, resultUnauthorized},
		{Outcome{Class: ClassRetryable, Status: 503}, resultFailed},
		{Outcome{Class: ClassRetryable, Code: "timeout"}, resultFailed},
		{Outcome{Class: ClassRetryable, Code: codeConnectionError}, resultUnreachable},
	} {
		require.Equal(t, tt.want, resultOf(tt.out), "%+v", tt.out)
	}
}

// TestIncidentFailuresInARow: failedTrip calls failed in a row hold the
// lane even when the window's successes keep the failure ratio low (a
// busy lane whose provider starts answering 5xx to every call); an answer
// between them starts the row again. The next call probes at once; a
// call in flight that fails while the lane is held is the incident's (it
// costs its job no attempt), and the probe's failure confirms it.
func TestIncidentFailuresInARow(t *testing.T) {
	t.Parallel()
	var reported []incidentCause
	b := newTestIncident(&reported)
	b.minCalls = 1000 // the ratio never trips here
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for range 100 {
		b.done(t0, false, resultAnswered)
	}
	for i := range failedTrip - 1 {
		outage, _ := b.done(at(time.Second), false, resultFailed)
		require.False(t, outage, "a 5xx before the lane is held is the job's")
		require.Equal(t, incidentClosed, b.state, "%d failed in a row", i+1)
	}
	b.done(at(time.Second), false, resultAnswered)
	for range failedTrip - 1 {
		b.done(at(2*time.Second), false, resultFailed)
	}
	require.Equal(t, incidentClosed, b.state, "an answer started the row again")
	outage, _ := b.done(at(3*time.Second), false, resultFailed)
	require.False(t, outage, "the failure that holds the lane was the job's")
	require.Equal(t, incidentOpen, b.state, "%d failed in a row, of %d in the window", failedTrip, 100+2*failedTrip)
	require.Empty(t, reported, "not reported before a probe fails")

	outage, lasted := b.done(at(4*time.Second), false, resultFailed)
	require.True(t, outage, "a call in flight as the lane was held: the incident's")
	require.Equal(t, 2*time.Second, lasted, "since the first of the row")
	ok, probe, _, _ := b.allow(at(4 * time.Second))
	require.True(t, ok && probe, "the next call probes at once")
	outage, _ = b.done(at(5*time.Second), true, resultFailed)
	require.True(t, outage)
	require.Equal(t, []incidentCause{causeFailures}, reported, "the failed probe confirms it")
	ok, _, wait, _ := b.allow(at(5 * time.Second))
	require.False(t, ok)
	require.Equal(t, 15*time.Second, wait, "then probes every 15 s")
	ok, probe, _, _ = b.allow(at(20 * time.Second))
	require.True(t, ok && probe)
	b.done(at(21*time.Second), true, resultAnswered)
	require.Equal(t, incidentClosed, b.state, "an answered probe ends it")
}
