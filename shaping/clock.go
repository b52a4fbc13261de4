package shaping

import (
	"sync"
	"time"
)

// Clock is the time source of the waiting layer ([Lane.Admit], [Bucket.Wait]).
// The algorithms themselves never read a clock: they take the time as an
// argument.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After returns a channel that receives the time once d has elapsed.
	// A d <= 0 fires at once.
	After(d time.Duration) <-chan time.Time
}

// SystemClock is the real clock. Its zero value is ready to use.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// After returns time.After(d).
func (SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// ManualClock is a virtual clock that only moves when [ManualClock.Advance]
// or [ManualClock.Set] is called. Timers created by After fire, in order of
// their deadline, when the clock reaches them. It is safe for concurrent use
// and starts no goroutines; tests use it to drive [Lane.Admit] without
// sleeping.
type ManualClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []manualWaiter
	added   chan struct{}
}

type manualWaiter struct {
	at time.Time
	ch chan time.Time
}

// NewManualClock returns a ManualClock reading start.
func NewManualClock(start time.Time) *ManualClock {
	return &ManualClock{now: start, added: make(chan struct{}, 1)}
}

// Now returns the clock's current reading.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives the clock's time once it has been
// advanced by at least d.
func (c *ManualClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, manualWaiter{at: c.now.Add(d), ch: ch})
	select {
	case c.added <- struct{}{}:
	default:
	}
	return ch
}

// Advance moves the clock forward by d and fires the timers that are due.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	t := c.now.Add(d)
	c.mu.Unlock()
	c.Set(t)
}

// Set moves the clock to t (never backwards) and fires the timers that are
// due.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
			continue
		}
		kept = append(kept, w)
	}
	clear(c.waiters[len(kept):])
	c.waiters = kept
}

// Timers returns how many timers are pending.
func (c *ManualClock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// NextTimer returns the deadline of the earliest pending timer, and false when
// there is none.
func (c *ManualClock) NextTimer() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next time.Time
	for i, w := range c.waiters {
		if i == 0 || w.at.Before(next) {
			next = w.at
		}
	}
	return next, len(c.waiters) > 0
}

// TimerAdded returns a channel that receives (without blocking the clock)
// after a timer was created, so a test can wait for a goroutine to start
// waiting before it advances the clock.
func (c *ManualClock) TimerAdded() <-chan struct{} { return c.added }
