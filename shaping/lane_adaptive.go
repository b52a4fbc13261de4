package shaping

import "time"

// The adaptive strategy's glue between a lane and its [Controller]: the
// controller is set up here, ticked on every admission, guided by the
// quotas the lane knows, and fed one [Sample] per finished request by
// [Permit.DoneAt]. The algorithm itself is in elastic.go.

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
	l.setSlotsLocked(l.ctrl.Limit())
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
		l.setSlotsLocked(l.ctrl.Tick(now))
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
// from its 429s (a token bucket holds a hidden token rate where a
// concurrency limit cannot): the tokens taken between two 429s measure the
// provider's limit; a 429 no measure explains cuts the quota to learnCut of
// the rate refused, and while the quota binds it grows back, CUBIC-like. The
// episodes, measures and growth: docs/design/rate-limiting.md#learning-a-quota-from-429s.
const (
	learnApart  = 2500 * time.Millisecond
	learnWindow = 10 * time.Second
	learnCut    = 0.5
	// learnPrecise is the widest spread of a measure, over its middle, that
	// makes it the reference of the next.
	learnPrecise = 0.4
	learnMargin  = 0.95
	learnMaxCut  = 0.8
	learnSpring  = 6.0
	learnFloor   = 0.06
	learnGrowth  = 0.1
	// learnPlateau is how far past the ceiling the growth reaches
	// learnFloor + learnGrowth.
	learnPlateau = 0.1
	// learnMin is the least learned quota, tokens a minute.
	learnMin = 60.0
	// spreadAlpha smooths the latency the sends are spread over.
	spreadAlpha = 0.2
)

// learnsTPM reports whether the lane learns its TPM quota from 429s.
func (l *Lane) learnsTPM() bool {
	return l.cfg.Strategy == StrategyAdaptive && (l.tpm == nil || l.learned)
}

// takenLocked is the all-time sum of the tokens the provider took: sent,
// less refused, less what settlement gave back.
func (l *Lane) takenLocked() float64 { return l.sentAll - l.refusedTok - l.unusedAll }

// takenSample is the lane's taken tokens at a time, for the rate over the
// last learnWindow.
type takenSample struct {
	at    time.Time
	taken float64
}

// sampleTakenLocked records what the provider has taken at now, at most
// once a second.
func (l *Lane) sampleTakenLocked(now time.Time) {
	n := len(l.takenHist)
	if last := l.takenHist[(l.takenNext+n-1)%n]; !last.at.IsZero() && now.Sub(last.at) < time.Second {
		return
	}
	l.takenHist[l.takenNext] = takenSample{at: now, taken: l.takenLocked()}
	l.takenNext = (l.takenNext + 1) % n
}

// recentRateLocked returns the tokens per minute the provider took over
// about the last learnWindow, and false when it took too little to tell
// (less than a request's worth, or over less than a second). A lane on a
// share of the quota measures what it sent, its share of what the
// provider took: the rate is the provider's, its own over its share.
func (l *Lane) recentRateLocked(now time.Time, tokens float64) (float64, bool) {
	var from takenSample
	for _, s := range l.takenHist {
		if s.at.IsZero() || now.Sub(s.at) > learnWindow {
			continue
		}
		if from.at.IsZero() || s.at.Before(from.at) {
			from = s
		}
	}
	dt := now.Sub(from.at).Seconds()
	taken := l.takenLocked() - from.taken
	if from.at.IsZero() || dt < 1 || taken <= tokens {
		return 0, false
	}
	return 60 * taken / dt / l.part(), true
}

// growLocked grows a learned quota that binds by the tokens an answer used
// (the provider's, over the lane's share).
func (l *Lane) growLocked(now time.Time, used float64) {
	if !l.learned || used <= 0 || l.tpm.LevelAt(now) >= 0 {
		return
	}
	limit, growth := l.tpmQ.limit, learnFloor
	switch x := limit / l.learnCeil; {
	case x < learnMargin:
		growth += learnSpring * (learnMargin/x - 1)
	case x > 1:
		growth += learnGrowth * min(1, (x-1)/learnPlateau)
	}
	next := limit + growth*used/l.part()
	if x := limit / l.learnCeil; x < learnMargin {
		next = min(next, max(limit+learnFloor*used/l.part(), learnMargin*l.learnCeil))
	}
	l.setLearnedLocked(now, next)
}

// learnFromRefusalLocked learns the TPM quota from a 429 at now of a
// request of tokens sent at sentAt, once the lane's pause has begun.
func (l *Lane) learnFromRefusalLocked(now, sentAt time.Time, tokens float64) {
	if !l.learnsTPM() {
		return
	}
	if sentAt.Before(l.reactedAt) {
		// The same event; its Retry-After may have made the pause longer.
		l.emptyLocked(now)
		if !sentAt.After(l.refusedAt) {
			// The reference counted it as taken: it was in flight then.
			l.refusedTaken -= tokens
		}
		return
	}
	l.reactedAt = now
	taken := l.takenLocked()
	limit := l.tpmQ.limit // 0 while none is learned
	defer l.emptyLocked(now)
	dt := now.Sub(l.refusedAt).Seconds()
	switch {
	case l.refusedAt.IsZero() || (dt >= learnApart.Seconds() && l.learnMeasured && limit <= l.learnLow):
		l.startEpisodeLocked(now, taken, tokens)
		return
	case dt < learnApart.Seconds():
		// Too close to the reference to measure; the cut did not do.
		if l.learned {
			cut := learnCut
			if l.learnMeasured {
				cut = learnMaxCut
			}
			l.setLearnedLocked(now, cut*limit)
		}
		return
	}
	// The provider's bucket held less than the reference's refused
	// request then and less than this one now: the limit is the tokens
	// taken in between, give or take those, over the time. The lane
	// measures its own part of what was taken: the provider's is that
	// over its share (the refused requests are the provider's bucket's).
	taken -= l.refusedTaken
	all := taken / l.part()
	lowest, highest := 60*(all-l.refusedTok1)/dt, 60*(all+tokens)/dt
	if !(highest > 0) {
		return
	}
	mid := max(0, (lowest+highest)/2)
	probing := l.learned && l.learnMeasured && limit > l.learnCeil
	ceil := (mid + highest) / 2
	if highest-lowest <= learnPrecise*mid {
		// Precise enough to measure the next from here.
		l.refusedAt, l.refusedTaken, l.refusedTok1 = now, taken+l.refusedTaken, tokens
		ceil = mid
	}
	next := learnMargin * mid
	if l.learned {
		next = min(next, limit)
		if probing {
			next = max(next, learnMaxCut*limit)
		}
	}
	l.learnCeil, l.learnLow, l.learnMeasured = ceil, max(0, lowest), true
	l.setLearnedLocked(now, max(next, learnMin))
}

// startEpisodeLocked starts an episode at a 429 no measure explains, of
// a request of tokens when the provider had taken taken: the 429 is the
// next measure's reference, and the rate the provider refused is the base
// of the cut.
func (l *Lane) startEpisodeLocked(now time.Time, taken, tokens float64) {
	first := l.refusedAt.IsZero()
	l.refusedAt, l.refusedTaken, l.refusedTok1 = now, taken, tokens
	l.learnMeasured, l.learnLow = false, 0
	rate, ok := l.recentRateLocked(now, tokens)
	if !ok {
		return
	}
	if l.learned {
		rate = min(rate, l.tpmQ.limit)
	}
	l.learnCeil = rate
	next := learnCut * rate
	if since := now.Sub(l.firstSent); first && since < learnWindow {
		// The first 429 came within learnWindow of the first send: what
		// the provider took was its bucket more than its refill. Its
		// bucket holds at most a minute of refill, so its limit is at
		// least what it took over the time plus a minute; resume there
		// and grow slowly (no spring): the next 429 comes late enough to
		// measure.
		if low := 60 * taken / (since.Seconds() + 60) / l.part(); low < next {
			next, l.learnCeil = low, low/learnMargin
		}
	}
	l.setLearnedLocked(now, max(next, learnMin))
}

// emptyLocked empties the learned bucket at a 429 (the provider's is
// empty) so that it holds nothing when the lane's pause ends: no burst of
// what it would have saved during the pause.
func (l *Lane) emptyLocked(now time.Time) {
	if l.learned {
		l.tpm.LowerAt(now, -l.tpm.Limit()/60*max(0, l.pauseUntil.Sub(now).Seconds()))
	}
}

// setLearnedLocked gives the learned TPM bucket limit, with a burst of a
// second of refill, creating the bucket (empty) when there is none.
func (l *Lane) setLearnedLocked(now time.Time, limit float64) {
	if !l.learned {
		b, err := NewBucket(BucketConfig{Name: "tpm", Limit: limit * l.part(), Start: StartEmpty}, now)
		if err != nil {
			return
		}
		l.tpm, l.learned = b, true
		l.tpmQ = view{}
		defer l.guideLocked()
	}
	l.tpmQ.limit, l.tpmQ.burst = limit, floorBurst(limit)
	l.applyLocked(now, l.tpm, &l.tpmQ)
}

// spreadLocked spaces the sends of a lane that knows no quota at all (no
// limit configured or in a header, none learned yet: nothing but its
// concurrency limit holds it) over the round trip: latency over the
// limit apart, the rate the limit allows. Sent as the answers free their
// slots, they would leave in bunches (calls sent together come back
// together), and the bunch that meets the provider's bucket empty is
// refused whole before the first 429 is back. From that 429 on, the
// learned bucket spaces them.
func (l *Lane) spreadLocked(latency time.Duration, answered bool) {
	if !l.learnsTPM() || l.tpm != nil || l.rpm != nil || !l.refusedAt.IsZero() || l.cfg.MinInterval != 0 || l.kind != ProviderNoHeaders {
		l.unspreadLocked()
		return
	}
	if !answered {
		return
	}
	if l.latency == 0 {
		l.latency = latency
	}
	l.latency += time.Duration(spreadAlpha * float64(latency-l.latency))
	l.spreading = true
	l.pacer.SetInterval(l.latency / time.Duration(max(1, l.slots.Limit())))
}

// unspreadLocked stops spreadLocked's spacing (a learned RPM has set its
// own).
func (l *Lane) unspreadLocked() {
	if l.spreading {
		l.spreading = false
		if l.rpm == nil {
			l.pacer.SetInterval(0)
		}
	}
}
