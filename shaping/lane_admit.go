package shaping

import (
	"context"
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
	return l.admit(ctx, req, deadline)
}

// AdmitBy is Admit for a request that has somewhere else to go (a fallback
// model): it fails at once with a [*WaitError] whose Deadline is by when
// the buckets or a 429 pause would hold the request past by, or past ctx's
// deadline when that comes first. The wait for a concurrency slot and for
// the pacing inside it is bounded by ctx only: it is the lane's own calls
// finishing, not its quota running out.
func (l *Lane) AdmitBy(ctx context.Context, req Request, by time.Time) (Permit, error) {
	deadline, ok := ctx.Deadline()
	if !ok || by.Before(deadline) {
		deadline = by
	}
	return l.admit(ctx, req, deadline)
}

func (l *Lane) admit(ctx context.Context, req Request, deadline time.Time) (Permit, error) {
	now := l.clock.Now()
	tokens := l.tokensFor(req)
	var r Reservation
	l.mu.Lock()
	for l.share == 0 {
		if l.wake == nil {
			l.wake = make(chan struct{})
		}
		wake := l.wake
		l.mu.Unlock()
		if err := l.waitShare(ctx, deadline, wake); err != nil {
			return Permit{}, err
		}
		now = l.clock.Now()
		l.mu.Lock()
	}
	l.tickLocked(now)
	err := l.reserveLocked(now, tokens, req.Quotas, deadline, &r)
	l.mu.Unlock()
	if err != nil {
		return Permit{}, err
	}
	// r.ReadyAt includes the pause as of the reservation: when it is not
	// after now, the first bucket and pause checks below would pass.
	waited := r.ReadyAt.After(now)
	for waited {
		ready, wake := l.readyWake(l.clock.Now(), &r)
		if wake == nil {
			break
		}
		if !deadline.IsZero() && ready.After(deadline) {
			return l.abandon(&r, &WaitError{Wait: ready.Sub(l.clock.Now()), Deadline: deadline})
		}
		if err := sleepUntil(ctx, l.clock, ready, wake); err != nil {
			return l.abandon(&r, err)
		}
	}
	for {
		if waited {
			if until := l.PausedUntil(); until.After(l.clock.Now()) {
				if !deadline.IsZero() && until.After(deadline) {
					now := l.clock.Now()
					return l.abandon(&r, &WaitError{Wait: until.Sub(now), Deadline: deadline})
				}
				if err := sleepUntil(ctx, l.clock, until, nil); err != nil {
					return l.abandon(&r, err)
				}
			}
		}
		waited = true
		if err := l.slots.Acquire(ctx); err != nil {
			return l.abandon(&r, err)
		}
		now = l.clock.Now()
		if l.PausedUntil().After(now) {
			l.slots.Release()
			continue
		}
		at := l.PaceReservationAt(now, &r)
		if !at.After(now) {
			if err = ctx.Err(); err != nil {
				if r.pace {
					l.pacer.CancelAt(at)
				}
				l.slots.Release()
				return l.abandon(&r, err)
			}
			break
		}
		err = sleepUntil(ctx, l.clock, at, nil)
		now = l.clock.Now()
		if err == nil && !l.PausedUntil().After(now) {
			break
		}
		// Cancelled, or a 429 paused the lane while the send waited for
		// its pacing: the booking and the slot go back.
		l.pacer.CancelAt(at)
		l.slots.Release()
		if err != nil {
			return l.abandon(&r, err)
		}
	}
	return l.send(now, &r), nil
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
