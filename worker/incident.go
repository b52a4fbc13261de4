package worker

import (
	"errors"
	"log/slog"
	"time"

	"github.com/sony/gobreaker/v2"
)

// A provider incident: most calls of a model failing across jobs (5xx,
// timeouts, connection resets) for longer than one job's retry schedule.
// Left to the retry policy, every job in flight would spend its attempts
// against an upstream that is down and be dead-lettered, however briefly
// it was unlucky. Instead each lane has a circuit breaker (sony/gobreaker,
// a well-kept implementation of the closed / open / half-open machine):
// when at least IncidentMinCalls calls of the last IncidentWindow were made
// and at least IncidentFailureRatio of them failed, the breaker opens and
// the lane's dispatcher holds every job (their leases renewed, their
// attempts untouched). Every IncidentProbeEvery it lets one job through as
// a probe; a probe that fails costs that job nothing (its attempt is given
// back to the policy), one that succeeds closes the breaker and the lane
// resumes. docs/worker-policy.md has the rules.

// Defaults of the incident breaker (Config).
const (
	IncidentMinCallsDefault     = 20
	IncidentFailureRatioDefault = 0.5
	IncidentWindowDefault       = time.Minute
	IncidentProbeEveryDefault   = 15 * time.Second
)

var (
	// errNotCalled reports an admission that made no call (the job left,
	// the call was not recorded): it counts neither way.
	errNotCalled = errors.New("worker: admitted, not called")
	// errProviderFailed reports a call the provider failed (ClassRetryable).
	errProviderFailed = errors.New("worker: provider failure")
)

// newIncident returns the breaker of the lane of model's entry ("" without
// a pool), nil when the worker runs without one (IncidentMinCalls < 0).
func (w *Worker) newIncident(model, entry string) *gobreaker.TwoStepCircuitBreaker[struct{}] {
	c := w.cfg
	if c.IncidentMinCalls < 0 {
		return nil
	}
	return gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:         model,
		MaxRequests:  1,
		Interval:     c.IncidentWindow,
		BucketPeriod: c.IncidentWindow / 6,
		Timeout:      c.IncidentProbeEvery,
		ReadyToTrip: func(n gobreaker.Counts) bool {
			return n.Requests >= uint32(c.IncidentMinCalls) &&
				float64(n.TotalFailures) >= c.IncidentFailureRatio*float64(n.Requests)
		},
		IsSuccessful: func(err error) bool { return !errors.Is(err, errProviderFailed) },
		IsExcluded:   func(err error) bool { return errors.Is(err, errNotCalled) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			held := 0.0
			if to != gobreaker.StateClosed {
				held = 1
			}
			w.metrics.incident.WithLabelValues(model, entry).Set(held)
			switch {
			case to == gobreaker.StateOpen && from == gobreaker.StateClosed:
				w.log.Warn("provider incident: most calls fail; holding the model's jobs and probing",
					slog.String("model", model), slog.String("entry", entry), slog.Duration("probe_every", c.IncidentProbeEvery))
			case to == gobreaker.StateClosed:
				w.log.Info("provider incident over: a probe succeeded", slog.String("model", model), slog.String("entry", entry))
			}
		},
	})
}

// holdForIncident waits while t's lane is held by an incident and returns
// the report to make of the call t is admitted for, or false when the job
// or the worker stopped first. A lane without a breaker is never held.
func (w *Worker) holdForIncident(l *lane, t *ticket) (report func(error), probe, ok bool) {
	if l.incident == nil {
		return func(error) {}, false, true
	}
	for {
		if done, err := l.incident.Allow(); err == nil {
			// Half-open admits one call at a time: this one, the probe.
			return done, l.incident.State() == gobreaker.StateHalfOpen, true
		}
		select {
		case <-w.workCtx.Done():
			return nil, false, false
		case <-t.ctx.Done():
			return nil, false, false
		case <-w.cfg.Clock.After(w.cfg.IncidentProbeEvery): // when the breaker lets a probe through
		}
	}
}

// incidentOutcome is what a call's outcome tells the breaker.
func incidentOutcome(out Outcome) error {
	if out.Class == ClassRetryable {
		return errProviderFailed
	}
	return nil
}
