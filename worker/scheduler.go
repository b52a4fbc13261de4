package worker

import (
	"context"
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
	v := s.items[best].value
	s.items = append(s.items[:best], s.items[best+1:]...)
	return v, true
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
