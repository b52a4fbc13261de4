package shaping

import (
	"strings"
	"time"
)

// A provider may limit its calls at a time besides its requests and tokens
// per minute, and its headers state only the latter. A lane whose
// concurrency is not configured starts slow (one call, one more per answer
// of a call sent at the cap, up to its limit) and learns the provider's
// from the 429s that name it ([RateLimitHeaders.Concurrency]): a cap over
// its concurrency limit, one below the calls in flight when the refused one
// was sent and one lower per refusal, raised by one call after
// concIncreaseEvery answers sent at the cap. Such a 429 says nothing about
// the buckets: no pause, no short bucket, no token quota learned from it.
// docs/design/rate-limiting.md#calls-at-a-time.

// concIncreaseEvery is how many answers sent at the learned cap raise it
// by one call: a provider that still takes no more refuses one call in
// that many, within the 1% of calls refused a gateway caller may see.
const concIncreaseEvery = 100

// concurrencyCap is what a lane learned of the provider's calls at a time.
type concurrencyCap struct {
	// limit is the cap; 0 when none (the lane's concurrency limit is
	// configured, or its slow start reached it, and no refusal named the
	// provider's since). slow: the lane is in its slow start.
	limit int
	slow  bool
	// changed is when limit last changed; atCap counts the answers since
	// then of calls sent with limit calls in flight.
	changed time.Time
	atCap   int
	// out is the calls sent and not answered: a slot is taken before the
	// pacing inside it, so the slots held count the calls waiting for it.
	out int
	// refused: the last call answered was refused for the provider's
	// calls at a time (other clients hold them), so the lane's free slot
	// is not one the provider would take a call in (ProviderHoldsSlots).
	refused bool
}

// providerCaps reports whether the cap is the provider's calls at a time,
// learned from a refusal (not a slow start's).
func (c *concurrencyCap) providerCaps() bool { return c.limit > 0 && !c.slow }

// bound is limit capped by what the lane learned.
func (c *concurrencyCap) bound(limit int) int {
	if c.limit > 0 {
		return min(limit, c.limit)
	}
	return limit
}

// ConcurrencyMessage reports whether a 429's message names a limit on
// concurrent requests rather than on requests or tokens per minute ("on
// concurrent requests", "too many concurrent requests", "concurrency
// limit").
func ConcurrencyMessage(msg string) bool {
	return strings.Contains(strings.ToLower(msg), "concurren")
}

// setSlotsLocked sets the concurrency limit (the configured one, or the
// controller's), capped by what the lane learned of the provider's.
func (l *Lane) setSlotsLocked(limit int) {
	l.slots.SetLimit(l.conc.bound(limit))
}

// baseSlotsLocked is the concurrency limit without the learned cap.
func (l *Lane) baseSlotsLocked() int {
	if l.ctrl != nil {
		return l.ctrl.Limit()
	}
	return l.cfg.Concurrency
}

// concurrencyRefusedLocked learns from a 429 at now of a request sent
// with out calls out (itself included), and reports whether it
// named the provider's concurrency. The provider held at least its limit
// of the others: the cap goes below them, and one below the cap in force
// (each refusal of a burst is one call the provider did not take; a
// refusal at a learned cap is another client on the key taking some).
func (l *Lane) concurrencyRefusedLocked(now time.Time, out int, h RateLimitHeaders) bool {
	if !h.Concurrency || l.cfg.Strategy == StrategyRetry {
		return false
	}
	c := &l.conc
	c.refused = true
	bound := out - 1
	if c.limit > 0 {
		bound = min(bound, c.limit-1)
	}
	c.limit, c.slow, c.changed, c.atCap = max(1, bound), false, now, 0
	l.setSlotsLocked(l.baseSlotsLocked())
	return true
}

// concurrencyAnsweredLocked counts an answer (not a 429) of a call sent
// with inFlight slots held (itself included): at the cap, it raises a slow start's cap
// by one (ending it at the lane's limit), and a learned cap by one after
// concIncreaseEvery of them.
func (l *Lane) concurrencyAnsweredLocked(now time.Time, inFlight int) {
	c := &l.conc
	c.refused = false
	if c.limit == 0 || inFlight < c.limit {
		return
	}
	if c.atCap++; c.slow || c.atCap >= concIncreaseEvery {
		c.limit, c.changed, c.atCap = c.limit+1, now, 0
		if base := l.baseSlotsLocked(); c.slow && c.limit >= base {
			c.limit, c.slow = 0, false
		}
		l.setSlotsLocked(l.baseSlotsLocked())
	}
}

// slotsAhead is the concurrency limit a scheduler may count on: in a slow
// start, the limit it grows to within a few round trips, not its cap now.
func (l *Lane) slotsAhead() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conc.slow {
		return l.baseSlotsLocked()
	}
	return l.slots.Limit()
}

// startSlowLocked starts a lane whose concurrency is not configured at one
// call.
func (l *Lane) startSlowLocked() {
	l.conc = concurrencyCap{limit: 1, slow: true}
	l.setSlotsLocked(l.baseSlotsLocked())
}
