package dlq

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeClock is a virtual Clock: time moves only with Advance, which fires
// the timers that came due.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced when timers change
}

type fakeTimer struct {
	clock *fakeClock
	at    time.Time
	ch    chan time.Time
}

func newFakeClock(now time.Time) *fakeClock {
	return &fakeClock{now: now, changed: make(chan struct{})}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{clock: c, at: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.ch <- c.now
		return t
	}
	c.timers = append(c.timers, t)
	c.signal()
	return t
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.timers, t)
	if i < 0 {
		return false
	}
	c.timers = slices.Delete(c.timers, i, i+1)
	c.signal()
	return true
}

// signal wakes the waiters of waitTimers; c.mu is held.
func (c *fakeClock) signal() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Advance moves the time by d and fires every timer due by then.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.ch <- c.now
	}
	clear(c.timers[len(kept):])
	c.timers = kept
	c.signal()
}

// waitTimers waits until the pending timers are exactly at the given
// offsets from now (in any order) and fails the test after 5 s.
func (c *fakeClock) waitTimers(t *testing.T, offsets ...time.Duration) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		c.mu.Lock()
		var got []time.Duration
		for _, tm := range c.timers {
			got = append(got, tm.at.Sub(c.now))
		}
		changed := c.changed
		c.mu.Unlock()
		slices.Sort(got)
		want := slices.Sorted(slices.Values(offsets))
		if slices.Equal(got, want) {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("pending timers at %v, want %v", got, want)
		}
	}
}
