package shaping

import (
	"sync"
	"time"
)

// Pacer spaces sends at least a minimum interval apart (Guava's
// SmoothRateLimiter idea, docs/design/rate-limiting.md). Each reservation
// books the next free send time, so concurrent senders leave in order, one
// interval apart. It is safe for concurrent use; an interval of 0 disables
// it.
type Pacer struct {
	mu       sync.Mutex
	interval time.Duration
	next     time.Time
}

// NewPacer returns a pacer with the given minimum interval.
func NewPacer(interval time.Duration) *Pacer {
	return &Pacer{interval: max(0, interval)}
}

// ReserveAt books a send and returns when it may go (now or later).
func (p *Pacer) ReserveAt(now time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.interval <= 0 {
		return now
	}
	at := now
	if p.next.After(at) {
		at = p.next
	}
	p.next = at.Add(p.interval)
	return at
}

// CancelAt gives back a booking made for at, if no later booking depends on
// it.
func (p *Pacer) CancelAt(at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.interval > 0 && p.next.Equal(at.Add(p.interval)) {
		p.next = at
	}
}

// SetInterval changes the minimum interval for bookings made from now on.
func (p *Pacer) SetInterval(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.interval = max(0, d)
}

// Interval returns the minimum interval.
func (p *Pacer) Interval() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.interval
}
