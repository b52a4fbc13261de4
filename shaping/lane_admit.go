package shaping

import (
	"context"
	"errors"
	"time"
)

// Admit waits, in the order of docs/design/rate-limiting.md, for every bucket
// (all together), then a concurrency slot, then the pacing inside the slot,
// and returns the permit to send. It fails at once with a [*WaitError] when
// the wait would pass ctx's deadline, with [ErrTooLarge] when the request can
// never fit, and with ctx's cause if ctx ends; then nothing stays reserved.
// How it reacts to headers, pauses and share 0: docs/design/rate-limiting.md#admit.
// When nothing waits it takes the lane's lock twice and allocates nothing.
func (l *Lane) Admit(ctx context.Context, req Request) (Permit, error) {
	deadline, _ := ctx.Deadline()
	return l.admit(ctx, req, deadline, time.Time{})
}

// AdmitBy is Admit for a request that has somewhere else to go (a fallback
// model): it fails at once with a [*WaitError] whose Deadline is by when
// the buckets or a 429 pause would hold the request past by, or past ctx's
// deadline when that comes first. The wait for a concurrency slot and for
// the pacing inside it is bounded by ctx only: it is the lane's own calls
// finishing, not its quota running out; unless the lane's slots are capped
// by the provider's calls at a time, learned from its refusals (other
// clients on the key hold them): that is the quota running out, and the
// slot is waited for until by too (acquireSlot).
func (l *Lane) AdmitBy(ctx context.Context, req Request, by time.Time) (Permit, error) {
	deadline, ok := ctx.Deadline()
	if !ok || by.Before(deadline) {
		deadline = by
	}
	return l.admit(ctx, req, deadline, by)
}

// admit is Admit with deadline, and by (zero: none) the bound of a wait for
// a slot capped by the provider's calls at a time.
func (l *Lane) admit(ctx context.Context, req Request, deadline, by time.Time) (Permit, error) {
	var r Reservation
	now, err := l.reserveAdmit(ctx, req, deadline, &r)
	if err != nil {
		return Permit{}, err
	}
	// r.ReadyAt includes the pause as of the reservation: when it is not
	// after now, the first bucket and pause checks below would pass.
	waited := r.ReadyAt.After(now)
	if waited {
		if err := l.waitBuckets(ctx, deadline, &r); err != nil {
			return l.abandon(&r, err)
		}
	}
	if now, err = l.slotAndPace(ctx, deadline, by, &r, waited); err != nil {
		return l.abandon(&r, err)
	}
	return l.send(now, &r), nil
}

// reserveAdmit waits for a share while the lane is on share 0, then ticks
// and reserves req's tokens into r under one lock. It returns the time of
// the reservation; on an error nothing is reserved.
func (l *Lane) reserveAdmit(ctx context.Context, req Request, deadline time.Time, r *Reservation) (time.Time, error) {
	now := l.clock.Now()
	tokens := l.tokensFor(req)
	l.mu.Lock()
	for l.share == 0 {
		if l.wake == nil {
			l.wake = make(chan struct{})
		}
		wake := l.wake
		l.mu.Unlock()
		if err := l.waitShare(ctx, deadline, wake); err != nil {
			return now, err
		}
		now = l.clock.Now()
		l.mu.Lock()
	}
	l.tickLocked(now)
	err := l.reserveLocked(now, tokens, req.Quotas, deadline, r)
	l.mu.Unlock()
	if err == nil {
		r.prompt = max(0, req.PromptTokens)
	}
	return now, err
}

// waitBuckets waits until r's buckets are ready, waking early when a header
// raises a level; it fails with a *WaitError when they would pass deadline.
func (l *Lane) waitBuckets(ctx context.Context, deadline time.Time, r *Reservation) error {
	for {
		ready, wake := l.readyWake(l.clock.Now(), r)
		if wake == nil {
			return nil
		}
		if !deadline.IsZero() && ready.After(deadline) {
			return &WaitError{Wait: ready.Sub(l.clock.Now()), Deadline: deadline}
		}
		if err := sleepUntil(ctx, l.clock, ready, wake); err != nil {
			return err
		}
	}
}

// slotAndPace waits out a lane pause (when the reservation waited), takes a
// concurrency slot and waits for r's pacing inside it, giving the slot back
// to wait out a pause that begins meanwhile. It returns the time to send;
// on an error it holds no slot and no pacer booking. by bounds the wait
// for a slot as acquireSlot says.
func (l *Lane) slotAndPace(ctx context.Context, deadline, by time.Time, r *Reservation, waited bool) (time.Time, error) {
	for {
		if waited {
			if until := l.PausedUntil(); until.After(l.clock.Now()) {
				if !deadline.IsZero() && until.After(deadline) {
					now := l.clock.Now()
					return now, &WaitError{Wait: until.Sub(now), Deadline: deadline}
				}
				if err := sleepUntil(ctx, l.clock, until, nil); err != nil {
					return time.Time{}, err
				}
			}
		}
		waited = true
		if err := l.acquireSlot(ctx, by); err != nil {
			return time.Time{}, err
		}
		now := l.clock.Now()
		if l.PausedUntil().After(now) {
			l.slots.Release()
			continue
		}
		at := l.PaceReservationAt(now, r)
		if !at.After(now) {
			if err := ctx.Err(); err != nil {
				if r.pace {
					l.pacer.CancelAt(at)
				}
				l.slots.Release()
				return now, err
			}
			return now, nil
		}
		err := l.waitPaced(ctx, at)
		now = l.clock.Now()
		if err == nil && !l.PausedUntil().After(now) {
			return now, nil
		}
		// Cancelled, or a 429 paused the lane while the send waited for
		// its pacing: the booking and the slot go back.
		l.pacer.CancelAt(at)
		l.slots.Release()
		if err != nil {
			return now, err
		}
	}
}

// waitPaced waits until at, the paced send booked for a reservation, or
// less: while the lane tries the provider, an admitted canary grows the
// trials, and a send they now cover goes at once, as one reserved then
// would (its booking goes back when no later one depends on it).
func (l *Lane) waitPaced(ctx context.Context, at time.Time) error {
	for {
		if err := sleepUntil(ctx, l.clock, at, l.trialWake()); err != nil {
			return err
		}
		now := l.clock.Now()
		if !at.After(now) {
			return nil
		}
		if l.trialCovers(now) {
			l.pacer.CancelAt(at)
			return nil
		}
	}
}

// waitShare waits for wake (a share given to a lane on share 0), at most
// until deadline (then a *WaitError) and ctx's end.
func (l *Lane) waitShare(ctx context.Context, deadline time.Time, wake <-chan struct{}) error {
	if deadline.IsZero() {
		select {
		case <-wake:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	if err := sleepUntil(ctx, l.clock, deadline, wake); err != nil {
		return err
	}
	select {
	case <-wake:
		return nil
	default:
		return &WaitError{Wait: deadline.Sub(l.clock.Now()), Deadline: deadline}
	}
}

// abandon gives back r for an Admit that fails with err.
func (l *Lane) abandon(r *Reservation, err error) (Permit, error) {
	l.CancelAt(l.clock.Now(), r)
	return Permit{}, err
}

// errSlotBy ends acquireSlot's wait at its bound.
var errSlotBy = errors.New("shaping: no slot by the bound")

// acquireSlot takes a concurrency slot, waiting in arrival order. A lane
// whose slots are capped by the provider's calls at a time, learned from
// its refusals, waits at most until by (when not zero) and then fails with
// a *WaitError whose Deadline is by: the provider's quota holds the
// request, as a 429 pause would, and a request with somewhere else to go
// (AdmitBy) goes there rather than wait for calls other clients hold.
// Otherwise it waits until ctx ends.
func (l *Lane) acquireSlot(ctx context.Context, by time.Time) error {
	if by.IsZero() || !l.providerCapsSlots() {
		return l.slots.Acquire(ctx)
	}
	if l.slots.TryAcquire() {
		return nil
	}
	now := l.clock.Now()
	if !by.After(now) {
		return &WaitError{Deadline: by}
	}
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	t := l.clock.AfterFunc(by.Sub(now), func() { cancel(errSlotBy) })
	defer t.Stop()
	if err := l.slots.Acquire(sctx); err != nil {
		if errors.Is(err, errSlotBy) {
			return &WaitError{Wait: by.Sub(now), Deadline: by}
		}
		return err
	}
	return nil
}

// providerCapsSlots reports whether the lane's slots are capped by the
// provider's calls at a time, learned from a refusal (not in a slow start).
func (l *Lane) providerCapsSlots() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conc.providerCaps()
}

// ProviderHoldsSlots reports whether the provider's calls at a time,
// learned from its refusals, hold the lane's slots: every slot is taken
// under that cap, or the last call answered was refused for it (a slot
// freed by a refused call, while its job backs off, is not one the
// provider would take a call in). A request with somewhere else to go
// would wait for calls other clients hold (AdmitBy), as it would for a
// 429 pause.
func (l *Lane) ProviderHoldsSlots() bool {
	l.mu.Lock()
	capped, refused := l.conc.providerCaps(), l.conc.refused
	l.mu.Unlock()
	return capped && (refused || l.slots.InFlight() >= l.slots.Limit())
}
