package worker

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// Scheduler orders ready work by priority with aging: an item's effective
// rank is its priority rank (0 high, 1 normal, 2 low) minus one step for every
// AgingStep it has waited, so a low-priority job waiting 2·AgingStep runs
// like a high one and none starves. Ties go first-in first-out. It is bounded
// by the worker's in-flight limit, not by itself.
type Scheduler[T any] struct {
	agingStep time.Duration
	clock     clockwork.Clock

	mu     sync.Mutex
	items  []schedItem[T]
	notify chan struct{}
}

// NewScheduler returns an empty scheduler whose waits are measured on clock.
// agingStep <= 0 means AgingStepDefault; a nil clock means the system clock.
func NewScheduler[T any](agingStep time.Duration, clock clockwork.Clock) *Scheduler[T] {
	if agingStep <= 0 {
		agingStep = AgingStepDefault
	}
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	return &Scheduler[T]{agingStep: agingStep, clock: clock, notify: make(chan struct{}, 1)}
}

// Push adds an item with the given priority rank, enqueued now.
func (s *Scheduler[T]) Push(v T, rank int) {
	s.mu.Lock()
	s.items = append(s.items, schedItem[T]{value: v, rank: rank, enqueued: s.clock.Now()})
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Len is the number of waiting items.
func (s *Scheduler[T]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.items)
}

// TryPop removes and returns the item that should run next. Aging changes
// effective ranks as time passes, so the best item is found by a scan at this
// instant; the queue is bounded by the worker's in-flight limit, so the scan
// stays cheap.
func (s *Scheduler[T]) TryPop() (T, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var zero T
	if len(s.items) == 0 {
		return zero, false
	}
	now := s.clock.Now()
	best := 0
	bestRank := s.items[0].effectiveAt(now, s.agingStep)
	for i := 1; i < len(s.items); i++ {
		r := s.items[i].effectiveAt(now, s.agingStep)
		// Items are appended in arrival order, so a strict < keeps FIFO on ties.
		if r < bestRank {
			best, bestRank = i, r
		}
	}
	return s.popLocked(best), true
}

// PopReady waits for an item that ready accepts, or for ctx to be done.
// ready is asked about the items in the order TryPop would take them, most
// urgent first, until one accepts: true pops it; false leaves it in its
// place, with a time to ask again (zero: when wake's channel fires, or a
// new item arrives). So an item held by something of its own (its
// tenant's quota) does not hold back the items behind it. ready runs under
// the scheduler's lock: it must not call the scheduler. wake returns the
// channel to wait on; nil = no wake but new items and the times.
func (s *Scheduler[T]) PopReady(ctx context.Context, ready func(T) (bool, time.Time), wake func() <-chan struct{}) (T, error) {
	for {
		var woken <-chan struct{}
		if wake != nil {
			woken = wake() // before asking: a wake after it is not lost
		}
		v, ok, retry := s.tryPopReady(ready)
		if ok {
			return v, nil
		}
		var timer clockwork.Timer
		var fire <-chan time.Time
		if !retry.IsZero() {
			timer = s.clock.NewTimer(max(retry.Sub(s.clock.Now()), time.Millisecond))
			fire = timer.Chan()
		}
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			var zero T
			return zero, ctx.Err()
		case <-s.notify:
		case <-woken:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// tryPopReady is PopReady's scan: the item it pops, or the earliest time
// to ask again about the items refused (zero: none is due at a time).
func (s *Scheduler[T]) tryPopReady(ready func(T) (bool, time.Time)) (v T, ok bool, retry time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.items) == 0 {
		return v, false, retry
	}
	now := s.clock.Now()
	// The most urgent item first, as TryPop finds it: the common case
	// (nothing of its own holds it) sorts and allocates nothing.
	best, bestRank := 0, s.items[0].effectiveAt(now, s.agingStep)
	for i := 1; i < len(s.items); i++ {
		if r := s.items[i].effectiveAt(now, s.agingStep); r < bestRank {
			best, bestRank = i, r
		}
	}
	if ok, retry = ready(s.items[best].value); ok {
		return s.popLocked(best), true, time.Time{}
	}
	order := make([]int, 0, len(s.items)-1)
	ranks := make([]float64, len(s.items))
	for i := range s.items {
		if ranks[i] = s.items[i].effectiveAt(now, s.agingStep); i != best {
			order = append(order, i)
		}
	}
	// Stable: ties keep arrival order, as in TryPop.
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(ranks[a], ranks[b]) })
	for _, i := range order {
		ok, at := ready(s.items[i].value)
		if ok {
			return s.popLocked(i), true, time.Time{}
		}
		if !at.IsZero() && (retry.IsZero() || at.Before(retry)) {
			retry = at
		}
	}
	return v, false, retry
}

// popLocked removes and returns item i.
func (s *Scheduler[T]) popLocked(i int) T {
	v := s.items[i].value
	s.items = append(s.items[:i], s.items[i+1:]...)
	return v
}

// Pop waits for an item or for ctx to be done.
func (s *Scheduler[T]) Pop(ctx context.Context) (T, error) {
	for {
		if v, ok := s.TryPop(); ok {
			return v, nil
		}
		select {
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		case <-s.notify:
		}
	}
}

type schedItem[T any] struct {
	value    T
	rank     int
	enqueued time.Time
}

func (it schedItem[T]) effectiveAt(now time.Time, step time.Duration) float64 {
	return float64(it.rank) - float64(now.Sub(it.enqueued))/float64(step)
}
