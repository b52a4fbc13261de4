package shaping

import (
	"math"
	"time"
)

// The staged burst of a provider whose kind is not known yet
// (docs/design/rate-limiting.md, "Pacing inside the slot"): the lane sends
// unpaced what a short bucket would surely hold (ShortBucket of refill of
// requests and of tokens: the trials), then one canary past them while the
// rest is paced. A short-bucket provider refuses the canary (one 429: the
// lane learns it is short); one that admits it doubles the trials it went
// past, and past twice ShortBucket of refill the lane spends what its
// headers say remains.

// trial is a short bucket the lane tries a provider of unknown kind with,
// in the lane's units.
type trial struct {
	capacity, level float64
	at              time.Time
}

// refill brings the trial to now at rate per second.
func (t *trial) refill(now time.Time, rate float64) {
	if now.After(t.at) {
		t.level = min(t.capacity, t.level+now.Sub(t.at).Seconds()*rate)
		t.at = now
	}
}

// startTrialLocked starts the staged burst at the first answer with
// headers of a lane that started by probe on the whole quota (a static
// lane paces every send; replicas learn the kind through the ledger),
// once the headers set the limits (an adaptive lane's create its buckets;
// trials sized before held nothing): the trials hold ShortBucket of refill
// each, requests and tokens (a short bucket holds as many seconds of both;
// a tokens' trial of a second cost a mix of long jobs one canary round
// trip more), as a short bucket full at the lane's start stands at the
// answered request's send (at): less what the lane reserved (the early
// trial: earlyTrial; a probe alone is presumed refilled), refilled since.
func (l *Lane) startTrialLocked(now, at time.Time) {
	if l.cfg.ColdStart != ColdStartProbe || l.kind != ProviderUnknown || l.share < 1 {
		return
	}
	l.trying = true
	spent := [2]float64{l.resReq - l.canReq, l.resTok - l.canTok - l.rfdTok}
	if spent[0] <= 1 {
		spent = [2]float64{} // the probe alone: its answer saw it, refilled
	}
	for i, q := range l.views() {
		if q.b == nil {
			continue
		}
		c := l.probeBurst(q.v.limit)
		l.trials[i] = trial{capacity: c, level: max(0, c-spent[i]), at: at}
		l.trials[i].refill(now, l.trialRate(i))
	}
}

// trialRate is the refill per second of the trial of view i.
func (l *Lane) trialRate(i int) float64 { return l.views()[i].v.limit / 60 }

// paceLocked reports whether a reservation of tokens is paced inside its
// slot ([Lane.PaceReservationAt]), and whether it is the trials' canary. A
// lane that knows its provider enforces per minute paces only a send that
// leaves a bucket with less than a second of refill; one that tries the
// provider charges every send to its trials and sends unpaced what they
// hold, and one canary at a time that they cannot hold (the requests', the
// tokens' or both: paced sends keep the tokens' trial empty when the jobs
// are large) and that goes now (one that waits for a bucket, a tenant's
// quota say, would keep the next canary back as long); otherwise every
// send is paced.
func (l *Lane) paceLocked(now time.Time, tokens float64, waits bool) (pace, canary bool) {
	if !waits && l.earlyLocked() {
		// The early trial (earlyTrial) goes at once: the trials the answer
		// starts count it spent at its send, as paced sends would not be.
		return false, false
	}
	low := (l.rpm != nil && l.rpm.level < l.rpm.rate) || (l.tpm != nil && l.tpm.level < l.tpm.rate)
	if !l.trying {
		return l.paceAll || low, false
	}
	costs := [2]float64{1, tokens}
	var fits [2]bool
	for i, q := range l.views() {
		fits[i] = true
		if q.b == nil {
			continue
		}
		t := &l.trials[i]
		t.refill(now, l.trialRate(i))
		fits[i] = t.level >= costs[i]
		t.level -= costs[i]
	}
	switch {
	case fits[0] && fits[1]:
		return low, false
	case !waits && !l.canaryOut:
		l.canaryOut = true
		return low, true
	}
	return true, false
}

// canaryDoneLocked ends the canary's flight: admitted (an answer with
// headers, not refused) while the lane still tries the provider, both
// trials double, whichever it went past: a short bucket holds as many
// seconds of requests as of tokens, and a trial left behind would need a
// canary round trip of its own (the requests' after the tokens' took llmq
// demo's mix one more). Once they hold more than twice ShortBucket of
// refill the provider is known to enforce per minute. A refused canary is
// refusedLocked's to learn from.
func (l *Lane) canaryDoneLocked(now time.Time, admitted bool) {
	l.canaryOut = false
	if !admitted || !l.trying {
		return
	}
	defer l.wakeLocked() // the sends paced meanwhile may go now
	minute := l.rpm == nil
	for i, q := range l.views() {
		t := &l.trials[i]
		if q.b == nil {
			continue
		}
		t.refill(now, l.trialRate(i))
		t.level += t.capacity
		t.capacity *= 2
		minute = minute || t.capacity > l.shortMax(q.v.limit)
	}
	if minute {
		l.setKindLocked(ProviderMinute)
	}
}

// trialWake returns, while the lane tries the provider, the channel
// closed when its trials may have grown (a canary admitted); nil once it
// knows the provider's kind.
func (l *Lane) trialWake() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.trying {
		return nil
	}
	if l.wake == nil {
		l.wake = make(chan struct{})
	}
	return l.wake
}

// trialCovers reports whether a send paced while the lane tried the
// provider may go now: its trials hold every send charged to them (its
// own included), or they ended on a minute bucket, and no bucket is left
// with less than a second of refill.
func (l *Lane) trialCovers(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if (l.rpm != nil && l.rpm.level < l.rpm.rate) || (l.tpm != nil && l.tpm.level < l.tpm.rate) {
		return false
	}
	if !l.trying {
		return !l.paceAll
	}
	for i, q := range l.views() {
		if q.b == nil {
			continue
		}
		t := &l.trials[i]
		t.refill(now, l.trialRate(i))
		if t.level < 0 {
			return false
		}
	}
	return true
}

// trialRoomLocked is, while the lane tries the provider, how many requests
// like one of tokens its trials let go between now and end: what they hold
// then, and a canary.
func (l *Lane) trialRoomLocked(now, end time.Time, tokens float64) (n int, trying bool) {
	if !l.trying {
		return 0, false
	}
	n = math.MaxInt32
	costs := [2]float64{1, max(1, tokens)}
	for i, q := range l.views() {
		if q.b == nil {
			continue
		}
		t := l.trials[i]
		t.refill(now, l.trialRate(i))
		room := t.level + max(0, end.Sub(now).Seconds())*l.trialRate(i)
		n = min(n, int(max(0, math.Floor(room/costs[i]+1e-9))))
	}
	if !l.canaryOut {
		n++
	}
	return n, true
}

// CanaryAfter is how many requests like req the lane would send from now
// until one goes as the staged burst's canary, that one included (0: none
// would: the lane does not try the provider, or a canary flies), and
// whether that one goes past the requests' trial. It reserves nothing: a
// scheduler with requests of several sizes asks it to send quick ones up
// to the canary, whose answer releases the next stage sooner than a long
// one's (docs/design/rate-limiting.md#pacing-inside-the-slot). A quick
// canary tests the provider only past the requests' trial: past the
// tokens' trial alone it goes past by its few tokens at most, which the
// refill during the sends' skew can cover on a short bucket.
func (l *Lane) CanaryAfter(now time.Time, req Request) (n int, pastRequests bool) {
	costs := [2]float64{1, float64(l.tokensFor(req))}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.trying || l.canaryOut {
		return 0, false
	}
	var levels [2]float64
	var tried [2]bool
	for i, q := range l.views() {
		if q.b == nil {
			continue
		}
		t := l.trials[i]
		t.refill(now, l.trialRate(i))
		levels[i], tried[i] = t.level, true
	}
	for n := 1; n <= canaryAfterMax; n++ {
		canary := false
		for i := range levels {
			canary = canary || tried[i] && levels[i] < costs[i]
		}
		if canary {
			return n, tried[0] && levels[0] < costs[0]
		}
		for i := range levels {
			levels[i] -= costs[i]
		}
	}
	return 0, false
}

// canaryAfterMax bounds CanaryAfter's count: a scheduler holds fewer
// requests (a claim takes at most 256).
const canaryAfterMax = 1024
