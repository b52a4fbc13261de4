package upstreamsim

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Clock is the source of time. Every decision of the simulator (limiter,
// schedule, latency, batch progress) reads it, so tests can run in virtual
// time with a FakeClock.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer created by a Clock.
type Timer interface {
	// C delivers the time once the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
}

// RealClock is the wall clock.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// NewTimer wraps time.NewTimer.
func (RealClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }

// sleep waits d on clock c, or until ctx is done (returning its error).
func sleep(ctx context.Context, c Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// FakeClock is a manually advanced Clock for tests. It is safe for
// concurrent use. Timers fire, in deadline order, when Advance or Set moves
// the time past their deadline.
type FakeClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	changed chan struct{}
}

// NewFakeClock returns a FakeClock showing t.
func NewFakeClock(t time.Time) *FakeClock {
	return &FakeClock{now: t, changed: make(chan struct{})}
}

// Now returns the fake time.
func (f *FakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer firing when the fake time reaches Now()+d.
func (f *FakeClock) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{clock: f, at: f.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.ch <- f.now
		return t
	}
	f.timers = append(f.timers, t)
	f.notifyLocked()
	return t
}

// Advance moves the time forward by d and fires the timers that are due.
func (f *FakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setLocked(f.now.Add(d))
}

// Set moves the time to t (never backwards) and fires the timers that are due.
func (f *FakeClock) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t.After(f.now) {
		f.setLocked(t)
	}
}

func (f *FakeClock) setLocked(t time.Time) {
	f.now = t
	sort.SliceStable(f.timers, func(i, j int) bool { return f.timers[i].at.Before(f.timers[j].at) })
	kept := f.timers[:0]
	for _, tm := range f.timers {
		if !tm.at.After(t) {
			tm.ch <- tm.at
			continue
		}
		kept = append(kept, tm)
	}
	clear(f.timers[len(kept):])
	f.timers = kept
	f.notifyLocked()
}

// Timers returns the number of timers waiting to fire.
func (f *FakeClock) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// WaitTimers blocks until at least n timers are waiting or ctx is done.
func (f *FakeClock) WaitTimers(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		if len(f.timers) >= n {
			f.mu.Unlock()
			return nil
		}
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (f *FakeClock) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

type fakeTimer struct {
	clock *FakeClock
	at    time.Time
	ch    chan time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	f := t.clock
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, tm := range f.timers {
		if tm == t {
			f.timers = append(f.timers[:i], f.timers[i+1:]...)
			f.notifyLocked()
			return true
		}
	}
	return false
}
