package shaping

import "time"

// The adaptive strategy's glue between a lane and its [Controller]: the
// controller is set up here, ticked on every admission, guided by the
// quotas the lane knows, and fed one [Sample] per finished request by
// [Permit.DoneAt]. The algorithms themselves are in elastic.go and aimd.go.

// initController sets up adaptive's controller (LaneConfig.Controller, or
// an [Elastic] starting at Concurrency), guides it with the configured
// quotas and applies its limit.
func (l *Lane) initController() error {
	l.ctrl = l.cfg.Controller
	if l.ctrl == nil {
		var err error
		if l.ctrl, err = NewElastic(ElasticConfig{Initial: l.cfg.Concurrency, Max: l.cfg.MaxConcurrency}); err != nil {
			return err
		}
	}
	if g, ok := l.ctrl.(Guided); ok {
		g.SetGuide(l.cfg.RPM, l.cfg.TPM)
	}
	l.slots.SetLimit(l.ctrl.Limit())
	return nil
}

// TickAt runs the controller's time-driven rules and applies its limit.
func (l *Lane) TickAt(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tickLocked(now)
}

func (l *Lane) tickLocked(now time.Time) {
	if l.ctrl != nil {
		l.slots.SetLimit(l.ctrl.Tick(now))
	}
}

// guideLocked gives a [Guided] controller the quotas the lane knows now,
// after calibration may have learned or changed them.
func (l *Lane) guideLocked() {
	if g, ok := l.ctrl.(Guided); ok {
		var rpm, tpm float64
		if l.rpm != nil {
			rpm = l.rpm.Limit()
		}
		if l.tpm != nil {
			tpm = l.tpm.Limit()
		}
		g.SetGuide(rpm, tpm)
	}
}
