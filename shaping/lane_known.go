package shaping

// ConcurrencyKnown reports whether the lane's concurrency limit is the
// calls at a time it runs when busy: configured, learned from the
// provider's refusals, or reached by its slow start. False while a slow
// start grows it (one call more per answer sent at the cap): the limit now
// says nothing of the provider's, which a busy lane reaches within a few
// round trips or learns from its first refusals. A predictor of the
// lane's drain counts no wait for a slot then.
func (l *Lane) ConcurrencyKnown() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.conc.slow
}
