package shaping

import (
	"fmt"
	"time"
)

// Request is what one admission asks for.
type Request struct {
	// PromptTokens is the estimated prompt size (see [Estimator]).
	PromptTokens int
	// MaxOutputTokens is the request's max output (n x max_tokens);
	// 0 = unset, N x LaneConfig.DefaultMaxOutput is reserved.
	MaxOutputTokens int
	// N is the number of choices the request asks for (its n): each may
	// be as long as the max output. 0 means 1.
	N int
	// Quotas are further buckets for this request only (its tenant's).
	Quotas []Quota
}

// maxInline is how many bucket claims a Reservation holds without allocating:
// the RPM and TPM buckets of three layers (provider lane, tenant, project).
const maxInline = 6

// Reservation is an admitted claim on every bucket of a lane, made by
// [Lane.ReserveAt]. It belongs to the lane that made it: pass it only to
// that lane's methods.
type Reservation struct {
	// ReadyAt is when all buckets (and any pause) allow the send.
	ReadyAt time.Time
	// Tokens is the number of tokens reserved (prompt + max output).
	Tokens int
	// prompt is the prompt's part of Tokens: its estimate.
	prompt int
	claims [maxInline]Claim
	n      int
	extra  []Claim
	// pace: the send is paced inside its slot (see [Lane.PaceReservationAt]);
	// canary: it is the request past the trials (lane_trial.go).
	pace, canary bool
}

func (r *Reservation) add(c Claim) {
	if r.n < maxInline {
		r.claims[r.n] = c
		r.n++
		return
	}
	r.extra = append(r.extra, c)
}

// lists returns r's claims as (at most) two slices, without allocating.
func (r *Reservation) lists() [2][]Claim { return [2][]Claim{r.claims[:r.n], r.extra} }

// tokensFor is the reservation of req: prompt plus max output (N default
// outputs when the request sets none).
func (l *Lane) tokensFor(req Request) int {
	out := req.MaxOutputTokens
	if out <= 0 {
		out = l.cfg.DefaultMaxOutput * max(1, req.N)
	}
	return max(0, req.PromptTokens) + out
}

// ReserveAt reserves req in every bucket of the lane together (RPM, TPM, the
// lane's and the request's quotas), or in none. It never blocks: the
// returned ReadyAt says when to proceed. It fails with [ErrTooLarge] when a
// bucket can never hold the request.
func (l *Lane) ReserveAt(now time.Time, req Request) (Reservation, error) {
	var res Reservation
	err := l.reserve(now, req, time.Time{}, &res)
	return res, err
}

// ReserveBeforeAt is ReserveAt that reserves nothing and fails with a
// [*WaitError] when the request would not be ready by deadline.
func (l *Lane) ReserveBeforeAt(now time.Time, req Request, deadline time.Time) (Reservation, error) {
	var res Reservation
	err := l.reserve(now, req, deadline, &res)
	return res, err
}

type charge struct {
	b    *Bucket
	cost float64
	// share is how many times the request's token count is in cost.
	share   float64
	ready   float64
	readyAt time.Time
}

// reserve fills *res, which must be zero; on error it stays zero.
func (l *Lane) reserve(now time.Time, req Request, deadline time.Time, res *Reservation) error {
	tokens := l.tokensFor(req)
	l.mu.Lock()
	err := l.reserveLocked(now, tokens, req.Quotas, deadline, res)
	l.mu.Unlock()
	if err == nil {
		res.prompt = max(0, req.PromptTokens)
	}
	return err
}

// reserveLocked is reserve with l.mu held.
func (l *Lane) reserveLocked(now time.Time, tokens int, quotas []Quota, deadline time.Time, res *Reservation) error {
	if l.cfg.Strategy == StrategyRetry {
		res.ReadyAt, res.Tokens = now, tokens
		return nil
	}
	if len(l.cfg.Quotas) > 0 || len(quotas) > 0 {
		return l.reserveSharedLocked(now, tokens, quotas, deadline, res)
	}
	if l.rpm == nil || l.tpm == nil {
		var own [1]charge
		cs := own[:0]
		if l.rpm != nil {
			cs = append(cs, charge{b: l.rpm, cost: 1})
		}
		if l.tpm != nil {
			cs = append(cs, charge{b: l.tpm, cost: float64(tokens), share: 1})
		}
		return l.chargeLocked(now, tokens, cs, deadline, res)
	}
	return l.chargeOwnLocked(now, tokens, deadline, res)
}

// chargeOwnLocked is chargeLocked for a lane with both an RPM and a TPM
// bucket and no quota, the common case: only the lane's own buckets,
// guarded by l.mu, so no bucket lock and no charge list.
func (l *Lane) chargeOwnLocked(now time.Time, tokens int, deadline time.Time, res *Reservation) error {
	rpm, tpm := l.rpm, l.tpm
	cost := float64(tokens)
	sr := rpm.rel(now)
	st := sr
	if tpm.origin != rpm.origin {
		st = tpm.rel(now)
	}
	// Peek in id order, as chargeLocked does.
	var rr, rt float64
	var ir, it bool
	var err error
	if rpm.id < tpm.id {
		if rr, ir, err = rpm.peekRel(sr, 1); err == nil {
			rt, it, err = tpm.peekRel(st, cost)
		}
	} else if rt, it, err = tpm.peekRel(st, cost); err == nil {
		rr, ir, err = rpm.peekRel(sr, 1)
	}
	if err != nil {
		return fmt.Errorf("shaping: lane %q: %w", l.cfg.Name, err)
	}
	ready := now
	if l.pauseUntil.After(ready) {
		ready = l.pauseUntil
	}
	atR, atT := now, now
	if !ir {
		if atR = rpm.abs(rr); atR.After(ready) {
			ready = atR
		}
	}
	if !it {
		if atT = tpm.abs(rt); atT.After(ready) {
			ready = atT
		}
	}
	if !deadline.IsZero() && ready.After(deadline) {
		return &WaitError{Wait: ready.Sub(now), Deadline: deadline}
	}
	tr, tt := rpm.take(1, rr), tpm.take(cost, rt)
	res.ReadyAt, res.Tokens, res.n = ready, tokens, 2
	cr, ct := &res.claims[0], &res.claims[1]
	if tpm.id < rpm.id {
		cr, ct = ct, cr
	}
	cr.bucket, cr.Tokens, cr.ReadyAt, cr.ticket, cr.fixes = rpm, 1, atR, tr, rpm.fixes
	ct.bucket, ct.Tokens, ct.ReadyAt, ct.share, ct.ticket, ct.fixes = tpm, cost, atT, 1, tt, tpm.fixes
	res.pace, res.canary = l.paceLocked(now, cost, ready.After(now))
	l.resReq++
	l.resTok += cost
	return nil
}

// reserveSharedLocked is reserveLocked with quotas: the quota buckets may be
// shared with other lanes, so every bucket is locked, in id order.
func (l *Lane) reserveSharedLocked(now time.Time, tokens int, quotas []Quota, deadline time.Time, res *Reservation) error {
	var inline [8]charge
	cs := inline[:0]
	if l.rpm != nil {
		cs = append(cs, charge{b: l.rpm, cost: 1})
	}
	if l.tpm != nil {
		cs = append(cs, charge{b: l.tpm, cost: float64(tokens), share: 1})
	}
	for _, qs := range [2][]Quota{l.cfg.Quotas, quotas} {
		for _, q := range qs {
			c := charge{b: q.Bucket, cost: 1}
			if q.Unit == UnitTokens {
				c.cost, c.share = float64(tokens), 1
			}
			cs = append(cs, c)
		}
	}
	cs = sortCharges(cs)
	for _, c := range cs {
		c.b.mu.Lock()
	}
	err := l.chargeLocked(now, tokens, cs, deadline, res)
	for _, c := range cs {
		c.b.mu.Unlock()
	}
	return err
}

// chargeLocked reserves cs (in lock order, all locked or owned) into *res,
// or nothing. Buckets with the same origin share one time conversion.
func (l *Lane) chargeLocked(now time.Time, tokens int, cs []charge, deadline time.Time, res *Reservation) error {
	ready := now
	if l.pauseUntil.After(ready) {
		ready = l.pauseUntil
	}
	var s float64
	var origin time.Time
	for i := range cs {
		c := &cs[i]
		if i == 0 || c.b.origin != origin {
			origin, s = c.b.origin, c.b.rel(now)
		}
		r, imm, err := c.b.peekRel(s, c.cost)
		if err != nil {
			return fmt.Errorf("shaping: lane %q: %w", l.cfg.Name, err)
		}
		c.ready, c.readyAt = r, now
		if !imm {
			c.readyAt = c.b.abs(r)
			if c.readyAt.After(ready) {
				ready = c.readyAt
			}
		}
	}
	if !deadline.IsZero() && ready.After(deadline) {
		return &WaitError{Wait: ready.Sub(now), Deadline: deadline}
	}
	res.ReadyAt, res.Tokens = ready, tokens
	for i := range cs {
		c := &cs[i]
		b := c.b
		res.add(Claim{bucket: b, Tokens: c.cost, ReadyAt: c.readyAt, share: c.share, ticket: b.take(c.cost, c.ready), fixes: b.fixes})
	}
	res.pace, res.canary = l.paceLocked(now, float64(tokens), ready.After(now))
	if l.rpm != nil {
		l.resReq++
	}
	if l.tpm != nil {
		l.resTok += float64(tokens)
	}
	return nil
}

// sortCharges orders charges by bucket id (the global lock order) and merges
// duplicates.
func sortCharges(cs []charge) []charge {
	for i := 1; i < len(cs); i++ {
		for j := i; j > 0 && cs[j].b.id < cs[j-1].b.id; j-- {
			cs[j], cs[j-1] = cs[j-1], cs[j]
		}
	}
	out := cs[:0]
	for _, c := range cs {
		if n := len(out); n > 0 && out[n-1].b == c.b {
			out[n-1].cost += c.cost
			out[n-1].share += c.share
			continue
		}
		out = append(out, c)
	}
	return out
}

// ReadyAt returns when r may proceed, given what was learned since it was
// made: a 429 pause, or a bucket corrected from the server's headers, which
// moves the ready times of queued reservations later (a level lowered, a
// rate cut) or earlier (a level raised). It is r.ReadyAt when nothing
// changed.
func (l *Lane) ReadyAt(r *Reservation) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.readyLocked(r)
}

// readyWake is ReadyAt, and a channel closed when a raised level may make r
// ready earlier (nil when r is ready at now).
func (l *Lane) readyWake(now time.Time, r *Reservation) (time.Time, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ready := l.readyLocked(r)
	if !ready.After(now) {
		return ready, nil
	}
	if l.wake == nil {
		l.wake = make(chan struct{})
	}
	return ready, l.wake
}

func (l *Lane) readyLocked(r *Reservation) time.Time {
	// The claims' ready times as corrected since (a claim ready at once
	// carries the reservation's time), and the pause.
	ready := r.ReadyAt
	if r.n > 0 {
		ready = r.claims[0].bucket.ReadyAt(r.claims[0])
	}
	for _, cs := range r.lists() {
		for _, c := range cs {
			if at := c.bucket.ReadyAt(c); at.After(ready) {
				ready = at
			}
		}
	}
	if l.pauseUntil.After(ready) {
		ready = l.pauseUntil
	}
	return ready
}

// CancelAt gives back the tokens of a reservation that will not be sent.
func (l *Lane) CancelAt(now time.Time, r *Reservation) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, cs := range r.lists() {
		for _, c := range cs {
			c.bucket.CancelAt(now, c)
		}
	}
	if l.rpm != nil && r.n > 0 {
		l.canReq++
	}
	if l.tpm != nil && r.n > 0 {
		l.canTok += float64(r.Tokens)
	}
	if r.canary && r.n > 0 {
		l.canaryOut = false
	}
	r.n, r.extra = 0, nil
}
