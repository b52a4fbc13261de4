package shaping

import (
	"math"
	"time"
)

// HeadroomAt is how many requests like typical the lane could admit between
// now and now+horizon (free slots, pacer sends, and each bucket's level plus
// refill over what typical costs), for a scheduler that claims only what the
// lane can admit soon. It reserves nothing and is never negative; a paused
// lane, or one on share 0, has none (docs/design/rate-limiting.md#headroomat).
func (l *Lane) HeadroomAt(now time.Time, horizon time.Duration, typical Request) int {
	n := l.slotsAhead() - l.slots.InFlight() - l.slots.Waiting()
	end := now.Add(max(0, horizon))
	if iv := l.pacer.Interval(); iv > 0 {
		l.pacer.mu.Lock()
		first := now
		if l.pacer.next.After(first) {
			first = l.pacer.next
		}
		l.pacer.mu.Unlock()
		sends := 0
		if !first.After(end) {
			sends = int(end.Sub(first)/iv) + 1
		}
		l.mu.Lock()
		room, trying := l.trialRoomLocked(now, end, float64(l.tokensFor(typical)))
		paceAll := l.paceAll
		l.mu.Unlock()
		switch {
		case trying:
			// Past the trials, sends are paced, not held.
			n = min(n, room+sends)
		case paceAll:
			n = min(n, sends)
		}
	}
	if l.cfg.Strategy == StrategyRetry {
		return max(0, n)
	}
	return max(0, min(n, l.bucketsHeadroom(now, end, typical)))
}

// HeldAt reports whether the lane's buckets or a pause by 429s would hold
// a request like typical past now+wait (what a job with a fallback waits
// at most before it moves on), its concurrency aside; never with unknown
// quotas (strategy retry). A lane on share 0 holds everything.
func (l *Lane) HeldAt(now time.Time, wait time.Duration, typical Request) bool {
	return l.cfg.Strategy != StrategyRetry && l.bucketsHeadroom(now, now.Add(max(0, wait)), typical) == 0
}

// bucketsHeadroom is how many requests like typical the lane's buckets
// (RPM, TPM, the lane's and typical's quotas) could admit between now and
// end: 0 while a pause by 429s lasts past end, and on share 0.
func (l *Lane) bucketsHeadroom(now, end time.Time, typical Request) int {
	tokens := float64(l.tokensFor(typical))
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pauseUntil.After(end) || l.share == 0 {
		return 0
	}
	n := math.MaxInt32
	// The lane's own buckets are guarded by l.mu; quota buckets may be
	// shared and are locked one at a time (only read).
	if l.rpm != nil {
		n = min(n, l.rpm.headroomLocked(now, end, 1))
	}
	if l.tpm != nil {
		n = min(n, l.tpm.headroomLocked(now, end, tokens))
	}
	for _, qs := range [2][]Quota{l.cfg.Quotas, typical.Quotas} {
		for _, q := range qs {
			cost := 1.0
			if q.Unit == UnitTokens {
				cost = tokens
			}
			q.Bucket.mu.Lock()
			n = min(n, q.Bucket.headroomLocked(now, end, cost))
			q.Bucket.mu.Unlock()
		}
	}
	return n
}

// TokenRoomAt is how many tokens the lane's buckets hold at now, for a
// scheduler that hands the lane only the jobs it can pay for at once: the
// least, over its token buckets (TPM and the lane's token quotas), of the
// level (reservations made are in it; requests not yet reserved are the
// caller's to count). bounded is false when no token bucket limits the
// lane (strategy retry, or no TPM known yet) and when every one of them is
// full: waiting would add no room, so a request larger than the room is
// the lane's to hold (it waits for a full bucket), not the scheduler's. A
// pause by 429s and the share are HeadroomAt's and HeldAt's to count.
func (l *Lane) TokenRoomAt(now time.Time) (room float64, bounded bool) {
	if l.cfg.Strategy == StrategyRetry {
		return 0, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	room = math.Inf(1)
	add := func(b *Bucket) {
		level, full := b.roomLocked(now, now)
		room = min(room, level)
		bounded = bounded || !full
	}
	if l.tpm != nil {
		add(l.tpm)
	}
	for _, q := range l.cfg.Quotas {
		if q.Unit == UnitTokens {
			q.Bucket.mu.Lock()
			add(q.Bucket)
			q.Bucket.mu.Unlock()
		}
	}
	if !bounded {
		return 0, false
	}
	return max(0, room), true
}

// roomLocked is what the bucket could take between now and end (its level
// at now plus its refill until end, negative in debt) and whether it is
// full at now. The bucket's lock, or its lane's, must be held.
func (b *Bucket) roomLocked(now, end time.Time) (avail float64, full bool) {
	s, e := b.rel(now), b.rel(end)
	b.advance(s)
	return b.level + b.cum(e) - b.cum(max(s, b.last)), b.level >= b.capacity
}

// headroomLocked is how many requests of cost the bucket could take between
// now and end: its level at now plus its refill until end, over cost (cost
// capped at the capacity: a request larger than the bucket is refused at
// admission, not here). The bucket's lock, or its lane's, must be held.
func (b *Bucket) headroomLocked(now, end time.Time, cost float64) int {
	avail, _ := b.roomLocked(now, end)
	cost = min(cost, b.capacity)
	if avail <= 0 || cost <= 0 {
		return 0
	}
	return int(min(math.Floor(avail/cost+1e-9), math.MaxInt32))
}
