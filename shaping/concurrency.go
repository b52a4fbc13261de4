package shaping

import (
	"context"
	"sync"
)

// ConcurrencyLimiter bounds the number of requests in flight. The limit may
// change at any time; lowering it never revokes slots already held, it only
// delays new ones. Waiters are served first-in first-out. It is safe for
// concurrent use and starts no goroutines.
type ConcurrencyLimiter struct {
	mu       sync.Mutex
	limit    int
	inFlight int
	waiting  int
	queue    []*slotWaiter
}

type slotWaiter struct {
	ready   chan struct{}
	granted bool
	gone    bool
}

// NewConcurrencyLimiter returns a limiter allowing limit requests at once
// (at least 1).
func NewConcurrencyLimiter(limit int) *ConcurrencyLimiter {
	return &ConcurrencyLimiter{limit: max(1, limit)}
}

// TryAcquire takes a slot if one is free and nobody is queued before.
func (c *ConcurrencyLimiter) TryAcquire() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inFlight < c.limit && c.waitingLocked() == 0 {
		c.inFlight++
		return true
	}
	return false
}

// Acquire waits for a slot, in arrival order, until ctx ends.
func (c *ConcurrencyLimiter) Acquire(ctx context.Context) error {
	c.mu.Lock()
	if c.inFlight < c.limit && c.waitingLocked() == 0 {
		c.inFlight++
		c.mu.Unlock()
		return nil
	}
	w := &slotWaiter{ready: make(chan struct{})}
	c.queue = append(c.queue, w)
	c.waiting++
	c.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		defer c.mu.Unlock()
		if w.granted {
			c.inFlight--
			c.grantLocked()
			return context.Cause(ctx)
		}
		w.gone = true
		c.waiting--
		return context.Cause(ctx)
	}
}

// Release returns a slot.
func (c *ConcurrencyLimiter) Release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inFlight > 0 {
		c.inFlight--
	}
	c.grantLocked()
}

// SetLimit changes the limit (at least 1) and admits waiters if it grew.
func (c *ConcurrencyLimiter) SetLimit(limit int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.limit = max(1, limit)
	c.grantLocked()
}

// Limit returns the current limit.
func (c *ConcurrencyLimiter) Limit() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.limit
}

// InFlight returns the slots held.
func (c *ConcurrencyLimiter) InFlight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inFlight
}

// Waiting returns the number of callers queued in Acquire.
func (c *ConcurrencyLimiter) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waitingLocked()
}

func (c *ConcurrencyLimiter) waitingLocked() int {
	return c.waiting
}

func (c *ConcurrencyLimiter) grantLocked() {
	for len(c.queue) > 0 && c.inFlight < c.limit {
		w := c.queue[0]
		c.queue[0] = nil
		c.queue = c.queue[1:]
		if w.gone {
			continue
		}
		w.granted = true
		c.waiting--
		c.inFlight++
		close(w.ready)
	}
	if len(c.queue) == 0 {
		c.queue = nil
	}
}
