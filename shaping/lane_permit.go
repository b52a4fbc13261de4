package shaping

import (
	"sync"
	"sync/atomic"
	"time"
)

// Outcome is how a sent request ended, for [Permit.Done].
type Outcome struct {
	// PromptTokens and CompletionTokens are the real usage; both 0 means
	// unknown, and the reservation is kept.
	PromptTokens, CompletionTokens int
	// Latency is send to last byte; 0 = measured by the lane's clock.
	Latency time.Duration
	// RateLimited is a 429: the whole lane pauses for Headers.RetryAfter
	// (or LaneConfig.PauseDefault) and the controller drains.
	RateLimited bool
	// Overloaded is a 503 or timeout: a congestion drop for the
	// controller, without a pause.
	Overloaded bool
	// Headers are the response's rate-limit headers ([ParseHeaders]).
	Headers RateLimitHeaders
}

// Permit is an admitted request: a small handle, passed by value. Exactly
// one of Done or Cancel must follow; after that the permit (and every copy
// of it) is spent: Done fails with [ErrPermitDone] and Cancel does nothing.
// The zero Permit is spent.
type Permit struct {
	lane   *Lane
	rec    *permitRec
	gen    uint64
	tokens int
	sentAt time.Time
}

// permitRec is the state of a permit in flight. Records are recycled: the
// generation counter, advanced once by Done or Cancel, tells a spent handle
// from the live one, so a stale copy never touches a recycled record.
type permitRec struct {
	gen      atomic.Uint64
	res      Reservation
	inFlight int
	// out is the calls sent and not answered at the send, itself included
	// (lane_concurrency.go).
	out              int
	markReq, markTok float64
	markRef, markRfd float64
	skewReq, skewTok float64
}

var permitPool = sync.Pool{New: func() any { return new(permitRec) }}

// SendAt records that a reservation holding a slot is sent at now and
// returns its permit.
func (l *Lane) SendAt(now time.Time, r Reservation) *Permit {
	p := l.send(now, &r)
	return &p
}

func (l *Lane) send(now time.Time, r *Reservation) Permit {
	rec := permitPool.Get().(*permitRec)
	l.mu.Lock()
	rec.skewReq, rec.skewTok = l.skewLocked(now)
	if l.rpm != nil {
		l.sentReq++
	}
	if l.tpm != nil {
		l.sentTok += float64(r.Tokens)
	}
	l.sentAll += float64(r.Tokens)
	if l.learnsTPM() {
		l.sampleTakenLocked(now)
		if l.firstSent.IsZero() {
			l.firstSent = now
		}
	}
	l.conc.out++
	rec.res, rec.inFlight, rec.out = *r, l.slots.InFlight(), l.conc.out
	rec.markReq, rec.markTok, rec.markRef, rec.markRfd = l.sentReq, l.sentTok, l.refTok, l.rfdTok
	l.mu.Unlock()
	l.admitted.Add(1)
	return Permit{lane: l, rec: rec, gen: rec.gen.Load(), tokens: r.Tokens, sentAt: now}
}

// answeredLocked learns from an answer that was not refused, of a request
// that used tokens, sent with inFlight slots held.
func (l *Lane) answeredLocked(now time.Time, used int, inFlight int) {
	l.growLocked(now, float64(used))
	l.concurrencyAnsweredLocked(now, inFlight)
}

// claim spends p, reporting false when it was spent already.
func (p Permit) claim() bool {
	return p.rec != nil && p.rec.gen.CompareAndSwap(p.gen, p.gen+1)
}

// recycle returns a claimed record to the pool.
func (r *permitRec) recycle() {
	r.res = Reservation{}
	permitPool.Put(r)
}

// Tokens returns the tokens reserved for the request.
func (p Permit) Tokens() int { return p.tokens }

// SentAt returns when the permit was issued.
func (p Permit) SentAt() time.Time { return p.sentAt }

// Cancel gives everything back for a request that was not sent.
func (p Permit) Cancel() {
	if !p.claim() {
		return
	}
	l := p.lane
	l.slots.Release()
	l.mu.Lock()
	l.conc.out--
	l.mu.Unlock()
	l.CancelAt(l.clock.Now(), &p.rec.res)
	p.rec.recycle()
}

// Done is DoneAt on the lane's clock.
func (p Permit) Done(o Outcome) error {
	if p.lane == nil {
		return ErrPermitDone
	}
	return p.DoneAt(p.lane.clock.Now(), o)
}

// DoneAt ends a sent request at now: it releases the slot, settles the
// tokens to the real usage (per LaneConfig.Settlement; once the provider
// sends rate-limit headers, the lane's TPM bucket gets back what the prompt's
// estimate took over its count, and of the unused output only the share
// they show the provider gives back), learns from a 429
// (see [ProviderShort]), calibrates the buckets from the headers, pauses
// the whole lane on a 429 until the advertised Retry-After (at most
// LaneConfig.MaxRetryAfter), and feeds the adaptive controller.
func (p Permit) DoneAt(now time.Time, o Outcome) error {
	if !p.claim() {
		return ErrPermitDone
	}
	rec, l := p.rec, p.lane
	l.slots.Release()
	latency := o.Latency
	if latency <= 0 {
		latency = now.Sub(p.sentAt)
	}
	actual := o.PromptTokens + o.CompletionTokens
	l.mu.Lock()
	l.conc.out--
	if actual > 0 && !o.RateLimited && l.cfg.Settlement == SettleActual {
		delta := float64(rec.res.Tokens - actual)
		// What the prompt's estimate took over its count comes back in
		// any case: a provider charges the prompt it counts. The rest is
		// the unused output.
		overPrompt := 0.0
		if o.PromptTokens > 0 {
			overPrompt = max(0, min(delta, float64(rec.res.prompt-o.PromptTokens)))
		}
		for _, cs := range rec.res.lists() {
			for _, c := range cs {
				if c.share == 0 {
					continue
				}
				d := c.share * delta
				if c.bucket == l.tpm && l.headersSeen && d > 0 {
					// The provider's headers show how much of the unused
					// output it gives back (OpenAI none).
					d = c.share * (overPrompt + (delta-overPrompt)*l.refundShare())
				}
				c.bucket.AdjustAt(now, d)
			}
		}
		if l.tpm != nil {
			l.refTok += delta
		}
		l.unusedAll += delta
	}
	m := marks{rec.markReq, rec.markTok, rec.markRef, rec.markRfd, 0, rec.skewReq, rec.skewTok}
	busy := o.RateLimited && l.concurrencyRefusedLocked(now, rec.out, o.Headers)
	if o.RateLimited {
		l.rateLimited.Add(1)
		if l.tpm != nil && o.Headers.HasRemainingTokens {
			// The server says what remains: the refused tokens come back
			// (the retry reserves them again), and its reading below
			// takes them again if it did charge them.
			m.own = float64(rec.res.Tokens)
			l.tpm.AdjustAt(now, m.own)
			l.rfdTok += m.own
		}
		l.refusedTok += float64(rec.res.Tokens)
		if !busy {
			l.refusedLocked(now, p.sentAt, float64(rec.res.Tokens), o.Headers)
		}
	} else {
		l.answeredLocked(now, actual, rec.inFlight)
	}
	l.calibrateLocked(now, p.sentAt, m, o.Headers, o.RateLimited)
	if rec.res.canary {
		h := o.Headers
		l.canaryDoneLocked(now, !o.RateLimited && (h.HasRemainingRequests || h.HasRemainingTokens))
	}
	if o.RateLimited && !busy {
		l.pauseLocked(now, o.Headers)
		l.learnFromRefusalLocked(now, p.sentAt, float64(rec.res.Tokens))
	}
	if l.ctrl != nil {
		l.setSlotsLocked(l.ctrl.Update(Sample{
			At: now, Latency: latency, Tokens: actual, OutputTokens: o.CompletionTokens,
			InFlight: rec.inFlight, Dropped: o.RateLimited || o.Overloaded,
		}))
	}
	l.spreadLocked(latency, !o.RateLimited)
	l.mu.Unlock()
	rec.recycle()
	return nil
}
