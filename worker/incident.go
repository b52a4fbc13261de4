package worker

import (
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// A provider incident (the provider unreachable, refusing the key, or
// failing most calls of a model) holds the lane: its dispatcher keeps every
// job (leases renewed, attempts untouched) and lets one through as a probe
// every IncidentProbeEvery; the calls that fail for the provider are free
// for up to OutageLimit. Rules in docs/worker-policy.md. Not
// sony/gobreaker: it reads the system clock, and its counts cannot tell a
// call that reached no one from a 5xx.

// Defaults of the incident breaker (Config).
const (
	IncidentMinCallsDefault     = 20
	IncidentFailureRatioDefault = 0.5
	IncidentWindowDefault       = time.Minute
	IncidentProbeEveryDefault   = 15 * time.Second
	// OutageLimitDefault bounds how long into an outage the calls that
	// fail for it cost their jobs no attempt: the outages a job could
	// wait out.
	OutageLimitDefault = 15 * time.Minute
)

// incidentCause is why a lane is held, the cause label of
// llmq_upstream_incidents_total.
type incidentCause string

const (
	causeFailures     incidentCause = "failures"
	causeUnreachable  incidentCause = "unreachable"
	causeUnauthorized incidentCause = "unauthorized"
)

// callResult is what one admitted call tells its lane's breaker.
type callResult int

const (
	// resultAnswered: the provider is up (an answer, a 429, a 4xx).
	resultAnswered callResult = iota
	// resultFailed: a 5xx, 408, 409 or timeout.
	resultFailed
	// resultUnreachable: no answer (connection refused or reset).
	resultUnreachable
	// resultUnauthorized: the provider refuses the API key (401).
	resultUnauthorized
)

// resultOf is what out tells the breaker.
func resultOf(out Outcome) callResult {
	switch {
	case out.Status == http.StatusUnauthorized:
		return resultUnauthorized
	case out.Class == ClassRetryable && out.Status == 0 && out.Code == codeConnectionError:
		return resultUnreachable
	case out.Class == ClassRetryable:
		return resultFailed
	}
	return resultAnswered
}

// incidentBuckets divide the window of the failure ratio.
const incidentBuckets = 6

// failedTrip is the number of calls in a row that fail (5xx, timeouts)
// that holds a lane, whatever the window's ratio: on a busy lane the
// minute of successes before a run of 5xx would keep the ratio low for as
// long again, and a worker that starts during one knows of nothing
// before; every failed call costs its job an attempt. The next call
// probes at once, so a short run costs a probe, not a hold.
const failedTrip = 5

// unreachableTrip is the number of calls in a row that get no answer
// that holds a lane: a connection reset now and then (a keep-alive
// connection the server dropped) costs a moment of doubt, not a hold.
const unreachableTrip = 3

// incident is the breaker of one lane, on the worker's clock: closed (calls
// go through, counted over a rolling IncidentWindow), open (held until
// probeAt) or probing (one call, the probe, in flight). Safe for concurrent
// use; every method takes the time.
type incident struct {
	minCalls   int
	ratio      float64
	window     time.Duration
	probeEvery time.Duration
	// change is told each state change, under the breaker's lock.
	change func(incidentChange)

	mu      sync.Mutex
	state   incidentState
	cause   incidentCause
	since   time.Time // when the incident began (zero while closed)
	probeAt time.Time // open: when the next probe may go
	// confirmed: the incident was reported (a lane held on calls that got
	// no answer is confirmed by its failed probe).
	confirmed bool
	// unreached counts the calls that got no answer while closed since
	// unreachedSince, with no answer to a call begun since. While it is
	// not 0 the lane is in doubt: one call at a time (testing) goes until
	// one is answered, or unreachableTrip hold the lane.
	unreached      int
	unreachedSince time.Time
	testing        bool
	// failedInRow counts the calls that failed (resultFailed) while
	// closed since the last one answered, the first at failedSince, less
	// than a window ago: failedTrip of them hold the lane.
	failedInRow int
	failedSince time.Time
	buckets     [incidentBuckets]struct {
		start           time.Time
		calls, failures int
	}
	wake chan struct{} // closed at the next change
}

type incidentState int

const (
	incidentClosed incidentState = iota
	incidentOpen
	incidentProbing
)

// incidentChange is a state change of a breaker: held or not, the incident
// to report (it began, or the key was refused), or its end.
type incidentChange struct {
	held, report, over bool
	cause              incidentCause
}

// allow reports whether a call may go at now, and whether it is the
// probe (of an incident, or of a lane in doubt); when none may, wake is
// closed at the next change and wait is how long until the next probe is
// due (0: when a call in flight ends).
func (b *incident) allow(now time.Time) (ok, probe bool, wait time.Duration, wake <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.state == incidentClosed && b.unreached == 0:
		return true, false, 0, nil
	case b.state == incidentClosed && !b.testing:
		b.testing = true
		return true, true, 0, nil
	case b.state == incidentClosed:
		return false, false, 0, b.wake
	case b.state == incidentOpen && !now.Before(b.probeAt):
		b.set(incidentProbing, b.cause, false)
		return true, true, 0, nil
	case b.state == incidentOpen:
		return false, false, b.probeAt.Sub(now), b.wake
	}
	return false, false, 0, b.wake
}

// notCalled records that a call admitted at allow (probe: as the probe)
// was not made: the next call probes at once.
func (b *incident) notCalled(probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case probe && b.state == incidentProbing:
		b.set(incidentOpen, b.cause, false)
	case probe && b.state == incidentClosed:
		b.testing = false
		b.notify()
	}
}

// done records the result r of a call admitted at allow (probe: it was
// the probe) at now. outage reports a failure that is the provider's, not
// the job's: no answer, a 401, a failed probe; lasted is how long the
// outage has lasted (since the first call in a row that got no answer, or
// since the lane was held).
func (b *incident) done(now time.Time, probe bool, r callResult) (outage bool, lasted time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	held := b.state != incidentClosed
	switch {
	case r == resultUnauthorized:
		// One 401 is enough: the key is refused for every job.
		b.trip(now, causeUnauthorized, now.Add(b.probeEvery), true)
	case b.state == incidentClosed:
		b.count(now, r == resultFailed || r == resultUnreachable)
		if probe || b.unreached > 0 {
			b.testing = b.testing && !probe
			defer b.notify() // the lane in doubt admits its next call
		}
		switch {
		case r == resultFailed && (b.failedInRow == 0 || now.Sub(b.failedSince) >= b.window):
			b.failedInRow, b.failedSince = 1, now
		case r == resultFailed:
			b.failedInRow++
		case r == resultAnswered:
			b.failedInRow = 0
		}
		switch {
		case r == resultUnreachable && b.unreached == 0:
			b.unreached, b.unreachedSince = 1, now
		case r == resultUnreachable:
			b.unreached++
		case probe:
			b.unreached = 0
		}
		// An answer to a call that began before the doubt says nothing
		// of the provider now: only the call let through ends it.
		switch {
		case b.unreached >= unreachableTrip:
			// Held, the next call probing at once: an outage costs a
			// few calls, not a storm, and a short one is over at once.
			b.trip(b.unreachedSince, causeUnreachable, now, false)
		case r == resultUnreachable:
			// No answer is the provider's failure, not the job's, even
			// before the lane is held.
			return true, now.Sub(b.unreachedSince)
		case r == resultFailed && b.failedInRow >= failedTrip:
			// As for calls that get no answer: held, the next call
			// probing at once, reported when that probe fails too.
			b.trip(b.failedSince, causeFailures, now, false)
		case r == resultFailed && b.tripsOnRatio(now):
			b.trip(now, causeFailures, now.Add(b.probeEvery), true)
		}
	case !probe:
		// Admitted before the lane was held: says nothing new of the
		// provider, but a failure is the incident's (below).
	case r == resultAnswered:
		b.close()
	case r == resultUnreachable:
		b.trip(now, causeUnreachable, now.Add(b.probeEvery), true)
	default:
		b.trip(now, causeFailures, now.Add(b.probeEvery), true)
	}
	if b.state == incidentClosed || r == resultAnswered || r == resultFailed && !probe && !held {
		// A failure that held the lane was the job's; one that ends
		// while the lane is held (admitted before, in flight as the
		// incident began) is the incident's.
		return false, 0
	}
	return true, now.Sub(b.since)
}

// trip holds the lane (again) for cause, an incident that began at since
// if it is a new one, until the next probe at probeAt; confirm reports the
// incident if it was not (or reports the key refused).
func (b *incident) trip(since time.Time, cause incidentCause, probeAt time.Time, confirm bool) {
	if b.state == incidentClosed {
		b.since, b.confirmed = since, false
	}
	b.probeAt, b.unreached, b.testing, b.failedInRow = probeAt, 0, false, 0
	report := confirm && (!b.confirmed || cause != b.cause && cause == causeUnauthorized)
	b.confirmed = b.confirmed || confirm
	b.set(incidentOpen, cause, report)
}

// close ends the incident: the probe was answered.
func (b *incident) close() {
	b.buckets = [incidentBuckets]struct {
		start           time.Time
		calls, failures int
	}{}
	b.set(incidentClosed, b.cause, false)
	b.since, b.confirmed = time.Time{}, false
}

// set moves the breaker to state to for cause, waking the waiting
// dispatcher and telling change.
func (b *incident) set(to incidentState, cause incidentCause, report bool) {
	held := b.state != incidentClosed
	b.state, b.cause = to, cause
	b.notify()
	b.change(incidentChange{held: to != incidentClosed, report: report, over: held && to == incidentClosed && b.confirmed, cause: cause})
}

// notify wakes the dispatcher waiting on the breaker.
func (b *incident) notify() {
	close(b.wake)
	b.wake = make(chan struct{})
}

// count adds a call at now to the rolling window.
func (b *incident) count(now time.Time, failed bool) {
	period := max(b.window/incidentBuckets, time.Nanosecond)
	start := now.Truncate(period)
	i := int(now.UnixNano()/int64(period)) % incidentBuckets
	if !b.buckets[i].start.Equal(start) {
		b.buckets[i].start, b.buckets[i].calls, b.buckets[i].failures = start, 0, 0
	}
	b.buckets[i].calls++
	if failed {
		b.buckets[i].failures++
	}
}

// tripsOnRatio reports whether the window at now holds at least minCalls
// calls, failureRatio of them failed.
func (b *incident) tripsOnRatio(now time.Time) bool {
	calls, failures := 0, 0
	for _, k := range b.buckets {
		if now.Sub(k.start) < b.window {
			calls, failures = calls+k.calls, failures+k.failures
		}
	}
	return calls >= b.minCalls && float64(failures) >= b.ratio*float64(calls)
}

// newIncident returns the breaker of the lane of model's entry ("" without
// a pool), nil when the worker runs without one (IncidentMinCalls < 0).
func (ls *laneSet) newIncident(model, entry string) *incident {
	cfg := ls.cfg
	if cfg.IncidentMinCalls < 0 {
		return nil
	}
	log := ls.cfg.Log.With(slog.String("model", model), slog.String("entry", entry))
	keySetting := "OPENAI_API_KEY"
	if entry != "" {
		keySetting = "the api_key of pool entry " + entry + " of " + model
	}
	return &incident{
		minCalls: cfg.IncidentMinCalls, ratio: cfg.IncidentFailureRatio, window: cfg.IncidentWindow,
		probeEvery: cfg.IncidentProbeEvery, wake: make(chan struct{}),
		change: func(c incidentChange) {
			held := 0.0
			if c.held {
				held = 1
			}
			ls.cfg.Metrics.incident.WithLabelValues(model, entry).Set(held)
			if c.report {
				ls.cfg.Metrics.incidents.WithLabelValues(model, entry, string(c.cause)).Inc()
			}
			every := slog.Duration("probe_every", cfg.IncidentProbeEvery)
			switch {
			case c.report && c.cause == causeUnauthorized:
				log.Error("provider refuses the API key (HTTP 401): holding the model's jobs and probing; check the key ("+keySetting+")", every)
			case c.report && c.cause == causeUnreachable:
				log.Warn("provider unreachable: holding the model's jobs and probing", every)
			case c.report:
				log.Warn("provider incident: most calls fail; holding the model's jobs and probing", every)
			case c.over:
				log.Info("provider incident over: a probe succeeded", slog.String("cause", string(c.cause)))
			}
		},
	}
}

// holdForIncident waits while t's lane is held by an incident and returns
// whether the call t is admitted for is the probe, or false when the job
// or the worker stopped first. A lane without a breaker is never held.
func (ls *laneSet) holdForIncident(l *lane, t *ticket) (probe, ok bool) {
	if l.incident == nil {
		return false, true
	}
	for {
		ok, probe, wait, wake := l.incident.allow(ls.cfg.Clock.Now())
		if ok {
			return probe, true
		}
		var due <-chan time.Time
		if wait > 0 {
			due = ls.cfg.Clock.After(wait)
		}
		select {
		case <-ls.workCtx.Done():
			return false, false
		case <-t.ctx.Done():
			return false, false
		case <-wake: // the probe ended
		case <-due: // the next probe is due
		}
	}
}
