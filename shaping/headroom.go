package shaping

import (
	"math"
	"time"
)

// HeadroomAt is how many requests like typical the lane could admit between
// now and now+horizon, for a scheduler that takes from a backlog only what
// the lane can admit soon: the free concurrency slots (limit minus in
// flight minus waiting), the sends the pacer allows in the horizon, and
// for each bucket (RPM, TPM, the lane's quotas) its level at now plus its
// refill until now+horizon, divided by what typical costs in it.
// Reservations already made are in the levels (as debt when ahead of the
// refill); requests not yet reserved are the caller's to count. A lane
// paused by 429s past the horizon has no headroom. With unknown quotas
// (strategy retry, or no bucket yet) only the concurrency counts. A lane on
// share 0 (it holds none of the quota) has none. It is never negative, and
// reserves nothing.
func (l *Lane) HeadroomAt(now time.Time, horizon time.Duration, typical Request) int {
	n := l.slots.Limit() - l.slots.InFlight() - l.slots.Waiting()
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
		n = min(n, sends)
	}
	if l.cfg.Strategy == StrategyRetry {
		return max(0, n)
	}
	tokens := float64(l.tokensFor(typical))
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pauseUntil.After(end) || l.share == 0 {
		return 0
	}
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
	return max(0, n)
}

// headroomLocked is how many requests of cost the bucket could take between
// now and end: its level at now plus its refill until end, over cost (cost
// capped at the capacity: a request larger than the bucket is refused at
// admission, not here). The bucket's lock, or its lane's, must be held.
func (b *Bucket) headroomLocked(now, end time.Time, cost float64) int {
	s, e := b.rel(now), b.rel(end)
	b.advance(s)
	avail := b.level + b.cum(e) - b.cum(max(s, b.last))
	cost = min(cost, b.capacity)
	if avail <= 0 || cost <= 0 {
		return 0
	}
	return int(min(math.Floor(avail/cost+1e-9), math.MaxInt32))
}
