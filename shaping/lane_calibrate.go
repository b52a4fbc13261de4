package shaping

import (
	"math"
	"time"
)

// ObserveAt applies headers that arrived at now outside a permit (for
// example on a request llmq did not shape) to the lane's buckets.
func (l *Lane) ObserveAt(now time.Time, h RateLimitHeaders) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calibrateLocked(now, now, marks{l.sentReq, l.sentTok, l.refTok, l.rfdTok, 0, 0, 0}, h, false)
}

// Observe is ObserveAt on the lane's clock.
func (l *Lane) Observe(h RateLimitHeaders) { l.ObserveAt(l.clock.Now(), h) }

// marks are the lane's ledger at a permit's send: the requests and tokens
// sent, the tokens settlement had given back, and the tokens of refused
// requests, so far; own is the permit's tokens when it was refused;
// skewReq and skewTok are the requests and tokens sent within SendSkew
// before it, which the provider may not have seen when it answered it.
type marks struct{ req, tok, ref, rfd, own, skewReq, skewTok float64 }

// sendRing is how many sends the lane remembers for the skew: more sends
// within LaneConfig.SendSkew than this count only the newest.
const sendRing = 128

// sendMark is one send: its time and the requests and tokens sent before.
type sendMark struct {
	at       time.Time
	req, tok float64
}

// skewLocked records a send at now and returns the requests and tokens
// sent within SendSkew before it. The sends in the window start at
// sendHead (sendCount of them); the ones before stay in the ring, for
// sentAfterLocked, until overwritten: amortised, a send costs the same
// however many share its window.
func (l *Lane) skewLocked(now time.Time) (req, tok float64) {
	from := now.Add(-max(0, l.cfg.SendSkew))
	for l.sendCount > 0 && !l.sends[l.sendHead].at.After(from) {
		l.sendHead = (l.sendHead + 1) % sendRing
		l.sendCount--
	}
	if l.sendCount > 0 && l.cfg.SendSkew > 0 {
		oldest := l.sends[l.sendHead]
		req, tok = l.sentReq-oldest.req, l.sentTok-oldest.tok
	}
	if l.sendCount == sendRing { // the oldest in the window is overwritten
		l.sendHead = (l.sendHead + 1) % sendRing
		l.sendCount--
	}
	l.sends[l.sendNext] = sendMark{at: now, req: l.sentReq, tok: l.sentTok}
	l.sendNext = (l.sendNext + 1) % sendRing
	l.sendCount++
	return req, tok
}

// sentAfterLocked returns the requests and tokens sent after the send that
// left the ledger at m, up to to (the sends at that send's own instant
// included: a burst leaves at one instant, and its requests may reach the
// server in any order), or false when the ring no longer holds every send
// after it.
func (l *Lane) sentAfterLocked(m marks, to time.Time) (req, tok float64, ok bool) {
	endReq, startReq, endTok, startTok := l.sentReq, l.sentReq, l.sentTok, l.sentTok
	for i := 1; i <= sendRing; i++ {
		s := l.sends[(l.sendNext-i+sendRing)%sendRing]
		if s.at.IsZero() || s.req < m.req || s.tok < m.tok {
			return endReq - startReq, endTok - startTok, true
		}
		startReq, startTok = s.req, s.tok
		if s.at.After(to) {
			endReq, endTok = s.req, s.tok
		}
	}
	return 0, 0, false
}

// calibrateLocked makes the server the source of truth about the minute: a
// limit header replaces (or, for adaptive, creates) the bucket's limit, and a
// remaining header sets the level through levelLocked; it lowers a level
// whatever its age but raises it only when it is fresh and safe to
// (docs/design/replicas.md#calibratelocked). The first header ends a cold
// start's probe.
func (l *Lane) calibrateLocked(now, at time.Time, m marks, h RateLimitHeaders, refused bool) {
	if l.cfg.Strategy == StrategyRetry {
		return
	}
	if !h.HasLimitRequests && !h.HasLimitTokens && !h.HasRemainingRequests && !h.HasRemainingTokens {
		if !l.headersSeen {
			l.kind = ProviderNoHeaders
		}
		return
	}
	first := !l.headersSeen
	if !l.headersSeen {
		l.headersSeen = true
		if l.kind == ProviderNoHeaders {
			l.kind = ProviderUnknown
		}
		l.endProbeLocked(now)
	}
	learn := l.cfg.Strategy == StrategyAdaptive
	if at.Before(l.limitsAt) {
		h.HasLimitRequests, h.HasLimitTokens = false, false
	} else if h.HasLimitRequests || h.HasLimitTokens {
		l.limitsAt = at
	}
	if limit, stated, ok := headerLimit(h.HasLimitRequests, h.LimitRequests, h.HasRemainingRequests, h.RemainingRequests, h.ResetRequests, l.rpm, &l.rpmQ); ok {
		l.rpm = l.learnLocked(now, l.rpm, &l.rpmQ, "rpm", limit, stated, learn)
		if l.cfg.MinInterval == 0 && l.rpm != nil {
			l.pacer.SetInterval(time.Duration(float64(time.Minute) / l.rpm.Limit()))
		}
	}
	if limit, stated, ok := headerLimit(h.HasLimitTokens, h.LimitTokens, h.HasRemainingTokens, h.RemainingTokens, h.ResetTokens, l.tpm, &l.tpmQ); ok && l.cfg.Strategy != StrategyRPM {
		l.tpm = l.learnLocked(now, l.tpm, &l.tpmQ, "tpm", limit, stated, learn)
		l.learned = false // a quota from the headers replaces one learned from 429s
	}
	if first {
		l.startTrialLocked(now, at) // sized by the limits just set
	}
	if l.ctrl != nil {
		l.guideLocked()
	}
	fresh := !at.Before(l.remainingAt)
	if fresh && (h.HasRemainingRequests || h.HasRemainingTokens) {
		l.remainingAt = at
	}
	// A 429 starts the distrust; a short bucket's capping does not show in
	// the per-minute headers, so its lane runs on its own refill.
	raise := fresh && !now.Before(l.distrustUntil) && l.kind != ProviderShort && (l.share == 1 || first || l.peersKnown)
	// On a short bucket learned from a refusal, the answers to requests
	// sent no later than it show the provider before the remaining it
	// showed: their levels are no news.
	level := l.kind != ProviderShort || at.After(l.shortSent) || refused && at.Equal(l.shortSent)
	raised := false
	othersReq, othersTok := l.peersSinceLocked(at)
	// The requests sent at this one's instant after it (a burst) may have
	// reached the server before it: the upper bound counts them as seen.
	earlyReq, earlyTok, _ := l.sentAfterLocked(m, at)
	if h.HasRemainingRequests && l.rpm != nil {
		if level {
			raised = l.levelLocked(now, at, l.rpm, &l.rpmQ, h.RemainingRequests, 0, l.resReq-l.canReq-m.req, earlyReq, m.skewReq, othersReq, raise)
		}
		if !refused && fresh {
			l.admittedLocked(now, l.rpm, &l.rpmQ, h.RemainingRequests)
		}
	}
	if h.HasRemainingTokens && l.tpm != nil {
		// Unseen: reserved since the send, less cancelled and refused
		// (the permit's own refusal is not one of them).
		unseen := max(0, l.resTok-l.canTok-m.tok-(l.rfdTok-m.rfd-m.own))
		if level {
			raised = l.levelLocked(now, at, l.tpm, &l.tpmQ, h.RemainingTokens, l.refTok-m.ref, unseen, earlyTok, m.skewTok, othersTok, raise) || raised
		}
		if !refused && fresh {
			l.admittedLocked(now, l.tpm, &l.tpmQ, h.RemainingTokens)
			l.refundsLocked(reading{ok: true, at: at, remaining: h.RemainingTokens, m: m})
		}
	}
	if raised {
		l.wakeLocked()
	}
}

// wakeLocked wakes the Admits waiting for their reservations to be ready:
// a level was raised, so they may be ready earlier.
func (l *Lane) wakeLocked() {
	if l.wake != nil {
		close(l.wake)
		l.wake = nil
	}
}

// levelLocked applies a remaining header to b, keeping the level between a
// lower and an upper bound of the lane's part of the server's level (the
// refill since the request was sent, the refunds it trusts, its share, less
// what it reserved unseen; on a share, less the other replicas' credit:
// docs/design/replicas.md#levellocked). A level above the upper bound is
// lowered to it, one below the lower raised when raise is set. It reports a
// raise.
func (l *Lane) levelLocked(now, at time.Time, b *Bucket, v *view, remaining, refunded, unseen, early, skew, others float64, raise bool) bool {
	age := max(0, now.Sub(at).Seconds())
	server := remaining + age*v.limit/60
	// The request reached the server up to SendSkew after its send: the
	// lower bound counts the refill from then; and, when the server has
	// requests still to see, which may reach it that late too, a full
	// server loses that much refill at its limit before they do.
	skewRefill := max(0, l.cfg.SendSkew.Seconds()) * v.limit / 60
	late := remaining + max(0, age*v.limit/60-skewRefill)
	top := v.limit
	if unseen+skew > 0 {
		top -= skewRefill
	}
	cut := v.limit - v.burst
	if l.kind == ProviderShort {
		cut = v.anchor
	}
	back := min(top, late+min(refunded, l.refundShare()*refunded)) - cut
	lo := l.share*back - unseen - skew
	if l.share < 1 && l.peersKnown {
		slack := (1 - l.share) * v.limit / 60 * (age + peersSlack.Seconds())
		lo = min(lo, back-others-slack-unseen-skew)
	}
	hi := min(l.share*v.limit, l.share*(server+max(0, refunded))-max(0, unseen-early)) - l.share*cut
	return b.calibrateAt(now, lo, hi, raise)
}

// reading is a fresh remaining-tokens header: the send time of its request,
// what remained, and the lane's ledger at that send.
type reading struct {
	ok        bool
	at        time.Time
	remaining float64
	m         marks
}

// refundsLocked measures, between the newest fresh reading and r, how much
// of the tokens the lane's settlements found unused the provider gave back:
// its remaining should be the previous one, plus the refill, less what the
// lane sent in between (not refused), plus what it gave back. Only when the
// minute bucket cannot have filled in between, once enough was unused to
// tell (0.5% of the limit); the first sample, then an average (weight
// 0.5). Another client spending on the key makes it look lower: safe.
func (l *Lane) refundsLocked(r reading) {
	last, v := l.lastTok, &l.tpmQ
	if !last.ok || !r.at.After(last.at) {
		l.lastTok = r
		return
	}
	start := last.remaining + r.at.Sub(last.at).Seconds()*v.limit/60
	unused := r.m.ref - last.m.ref
	switch {
	case start >= v.limit:
		l.lastTok = r // the bucket may have filled: start again from r
	case unused >= 0.005*v.limit:
		// Requests sent within SendSkew around either reading may have
		// reached the server on its other side, which looks like tokens
		// given back: the sample counts them as not given back, and only
		// when they are a tenth of the unused tokens at most.
		_, after, ok := l.sentAfterLocked(last.m, last.at.Add(l.cfg.SendSkew))
		skew := r.m.skewTok + after
		switch {
		case !ok:
			l.lastTok = r
			return
		case skew > 0.1*unused:
			return // wait for more unused tokens
		}
		sent := (r.m.tok - r.m.rfd) - (last.m.tok - last.m.rfd)
		// A sample is not clamped to [0, 1] (refundShare clamps the
		// average): the readings' timing error is as likely either way,
		// and clamping each sample at 0 would turn it into tokens back.
		back := min(2, max(-1, (r.remaining-skew-(start-sent))/unused))
		if !l.refundsKnown {
			l.refunds, l.refundsKnown = back, true
		}
		l.refunds += 0.5 * (back - l.refunds)
		l.lastTok = r
	}
}

// refundsFloor is the least measured share of unused tokens given back
// that the lane believes: the measure is noisy (readings are timed at the
// send, not at the server), and a provider that gives nothing back
// measured at a few percent would have the lane credit tokens that never
// come back, a few per request, until it is short by one request's worth
// and meets a 429. Providers give back all of them or none.
const refundsFloor = 0.25

// refundShare is the share of the unused tokens the lane counts as back at
// the provider once it sends headers: as measured (none below
// refundsFloor, at most all); before a measure, none, whatever the bucket:
// the headers show them when they are back; a short bucket's per-minute
// headers, about full while the lane keeps it busy, may never measure
// them, and a lane crediting tokens a provider kept is refused
// (docs/design/rate-limiting.md#refundshare).
func (l *Lane) refundShare() float64 {
	switch {
	case l.refundsKnown && l.refunds < refundsFloor:
		return 0
	case l.refundsKnown:
		return min(1, l.refunds)
	}
	return 0
}

// headerLimit returns the limit a response gives for the bucket b with view
// v: its limit header (stated), or, when it has none and the lane never had
// one, the limit its remaining and reset imply: the bucket refills limit/60
// per second, so it is full again after reset = (limit − remaining) /
// (limit/60s). That reading counts only while the bucket is at least half
// full, where it is exact enough, and only when it differs from the limit
// in force by more than 5% (the header's rounding stays below that).
func headerLimit(hasLimit bool, limit float64, hasRemaining bool, remaining float64, reset time.Duration, b *Bucket, v *view) (float64, bool, bool) {
	switch {
	case hasLimit:
		return limit, true, limit > 0
	case v.fromHeader || !hasRemaining || remaining <= 0 || reset <= 0 || reset > 30*time.Second:
		return 0, false, false
	}
	limit = remaining / (1 - reset.Seconds()/60)
	return limit, false, b == nil || math.Abs(limit-v.limit) > 0.05*v.limit
}

// learnLocked applies a limit from a header to b and its view v: a changed
// limit (by half a token or more) replaces the refill, and the capacity
// follows it; a nil b is created full at the limit when create is set
// (adaptive), else stays nil. stated is a limit header (not a reading of
// remaining and reset).
func (l *Lane) learnLocked(now time.Time, b *Bucket, v *view, name string, limit float64, stated, create bool) *Bucket {
	if b == nil {
		if !create {
			return nil
		}
		nb, err := NewBucket(BucketConfig{Name: name, Limit: limit * l.part(), Start: StartFull}, now)
		if err != nil {
			return nil
		}
		*v = view{limit: limit, burst: limit, fromHeader: stated}
		nb.setCapacity(limit*l.part(), limit)
		return nb
	}
	v.fromHeader = v.fromHeader || stated
	if math.Abs(v.limit-limit) >= 0.5 {
		switch {
		case v.burst >= v.limit:
			v.burst = limit
		case l.kind == ProviderShort:
			// A short bucket holds a time of refill: it scales with the
			// limit, and so does the remaining it is measured from.
			ratio := limit / v.limit
			v.burst, v.anchor = v.burst*ratio, v.anchor*ratio
		}
		v.limit, v.burst = limit, min(v.burst, limit)
		l.applyLocked(now, b, v)
	}
	return b
}

// applyLocked gives b the lane's share of v: the refill of the limit, the
// capacity of the trusted burst, and reservations up to the provider's
// whole limit. One larger than the capacity waits for a full bucket and
// leaves it in debt; on a short-bucket provider whose whole quota the lane
// holds (share 1: no other replica spends it), for all its tokens instead:
// the provider's bucket, which holds the request, has them then, whereas
// with a burst learned below the request a full lane's bucket says little
// of the provider's.
func (l *Lane) applyLocked(now time.Time, b *Bucket, v *view) {
	_ = b.SetLimitAt(now, v.limit*l.part())
	b.mu.Lock()
	b.advance(b.rel(now))
	b.setCapacity(v.burst*l.part(), v.limit)
	b.whole = l.kind == ProviderShort && l.share == 1
	b.mu.Unlock()
}

// pauseLocked pauses the whole lane after a 429, until the advertised
// Retry-After (LaneConfig.PauseDefault without one), at most
// LaneConfig.MaxRetryAfter; a pause already longer stays. Retry has no
// admission control, so nothing pauses it.
func (l *Lane) pauseLocked(now time.Time, h RateLimitHeaders) {
	if l.cfg.Strategy == StrategyRetry {
		return
	}
	wait := l.cfg.PauseDefault
	if h.HasRetryAfter {
		wait = h.RetryAfter
	}
	wait = min(max(0, wait), l.cfg.MaxRetryAfter)
	if until := now.Add(wait); until.After(l.pauseUntil) {
		l.pauseUntil = until
	}
}
