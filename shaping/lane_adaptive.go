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

// Without a TPM quota from configuration or headers, adaptive learns one
// from its 429s: a concurrency limit cannot hold a token rate under a
// hidden limit when requests range from a few hundred tokens to thousands
// (each probe past the limit costs several 429s), a token bucket can. A
// 429 for tokens comes when the provider's bucket is empty; between two of
// them, however the lane sent, the provider took its refill (the bucket is
// empty at both ends), so the tokens it took in between (sent, less
// refused, less what settlement gave back) over the time in between are
// its limit. The first 429 is the reference; from the second on (at least
// learnApart later; closer ones are the same event), the learned quota is
// 95% of that rate, never raised by a refusal and cut by at most 20% by
// one (the bucket may have filled in between, which the rate would not
// show). While it binds (requests wait on it) it grows by learnGrowth per
// minute, plus a spring of learnSpring times how far it is below where the
// last refusal found it (best/limit − 1): back quickly towards a level the
// provider admitted, then slowly past it. Its burst is a second of
// refill. A limit header replaces it.
const (
	learnApart     = 2500 * time.Millisecond
	learnGrowth    = 0.1
	learnMargin    = 0.95
	learnMaxCut    = 0.8
	learnSpring    = 2.0
	learnFirstBest = 1.25
)

// learnsTPM reports whether the lane learns its TPM quota from 429s.
func (l *Lane) learnsTPM() bool {
	return l.cfg.Strategy == StrategyAdaptive && (l.tpm == nil || l.learned)
}

// takenLocked is the all-time sum of the tokens the provider took: sent,
// less refused, less what settlement gave back.
func (l *Lane) takenLocked() float64 { return l.sentAll - l.refusedTok - l.unusedAll }

// growLocked grows a learned quota that binds by the tokens an answer used.
func (l *Lane) growLocked(now time.Time, used float64) {
	if l.learned && used > 0 && l.tpm.LevelAt(now) < 0 {
		growth := learnGrowth + learnSpring*max(0, l.learnBest/l.tpmQ.limit-1)
		l.setLearnedLocked(now, l.tpmQ.limit*(1+growth*used/l.tpmQ.limit))
	}
}

// learnFromRefusalLocked learns the TPM quota from a 429 at now.
func (l *Lane) learnFromRefusalLocked(now time.Time) {
	if !l.learnsTPM() || (!l.refusedAt.IsZero() && now.Sub(l.refusedAt) < learnApart) {
		return
	}
	prev, prevTaken := l.refusedAt, l.refusedTaken
	l.refusedAt, l.refusedTaken = now, l.takenLocked()
	if prev.IsZero() {
		return
	}
	limit := 60 * (l.refusedTaken - prevTaken) / now.Sub(prev).Seconds() * learnMargin
	if !(limit > 0) {
		return
	}
	if l.learned {
		l.learnBest = l.tpmQ.limit
		limit = min(max(limit, l.tpmQ.limit*learnMaxCut), l.tpmQ.limit)
	} else {
		b, err := NewBucket(BucketConfig{Name: "tpm", Limit: limit * l.share, Start: StartEmpty}, now)
		if err != nil {
			return
		}
		l.tpm, l.learned = b, true
		l.tpmQ = view{}
		// The bucket may have filled between the first two 429s (the lane
		// was still ramping up): the spring pulls a quarter past the rate.
		l.learnBest = limit * learnFirstBest
	}
	l.setLearnedLocked(now, limit)
	l.guideLocked()
}

// setLearnedLocked gives the learned TPM bucket limit, with a burst of a
// second of refill.
func (l *Lane) setLearnedLocked(now time.Time, limit float64) {
	l.tpmQ.limit, l.tpmQ.burst = limit, floorBurst(limit)
	l.applyLocked(now, l.tpm, &l.tpmQ)
}
