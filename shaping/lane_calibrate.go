package shaping

import (
	"math"
	"time"
)

// ObserveAt applies headers that arrived at now outside a permit (for
// example on a request llmq did not shape) to the lane's buckets.
func (l *Lane) ObserveAt(now time.Time, h RateLimitHeaders) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calibrateLocked(now, now, l.sentReq, l.sentTok, l.refTok, h)
}

// Observe is ObserveAt on the lane's clock.
func (l *Lane) Observe(h RateLimitHeaders) { l.ObserveAt(l.clock.Now(), h) }

// calibrateLocked makes the server the source of truth: a limit header
// replaces (or, for adaptive, creates) the bucket's limit, and a remaining
// header lowers the level to what the server had at `at` plus the refill
// and the settlements since, minus what this lane reserved that the server
// had not yet seen.
// It never raises a level, so stale or reordered headers stay safe.
func (l *Lane) calibrateLocked(now, at time.Time, markReq, markTok, markRef float64, h RateLimitHeaders) {
	if l.cfg.Strategy == StrategyRetry {
		return
	}
	learn := l.cfg.Strategy == StrategyAdaptive
	if at.Before(l.limitsAt) {
		h.HasLimitRequests, h.HasLimitTokens = false, false
	} else if h.HasLimitRequests || h.HasLimitTokens {
		l.limitsAt = at
	}
	if h.HasLimitRequests && h.LimitRequests > 0 {
		l.rpm = l.learnLocked(now, l.rpm, "rpm", h.LimitRequests, learn)
		if l.cfg.MinInterval == 0 && l.rpm != nil {
			l.pacer.SetInterval(time.Duration(float64(time.Minute) / l.rpm.Limit()))
		}
	}
	if h.HasLimitTokens && h.LimitTokens > 0 && l.cfg.Strategy != StrategyRPM {
		l.tpm = l.learnLocked(now, l.tpm, "tpm", h.LimitTokens, learn)
	}
	if l.ctrl != nil {
		l.guideLocked()
	}
	if h.HasRemainingRequests && l.rpm != nil {
		l.rpm.lowerSince(now, at, h.RemainingRequests, l.resReq-l.canReq-markReq)
	}
	if h.HasRemainingTokens && l.tpm != nil {
		l.tpm.lowerSince(now, at, h.RemainingTokens+l.refTok-markRef, l.resTok-l.canTok-markTok)
	}
}

// learnLocked applies a limit header to b: a changed limit (by half a token
// or more) replaces the refill and scales the capacity with it; a nil b is
// created full at the limit when create is set (adaptive), else stays nil.
func (l *Lane) learnLocked(now time.Time, b *Bucket, name string, limit float64, create bool) *Bucket {
	if b == nil {
		if !create {
			return nil
		}
		nb, err := NewBucket(BucketConfig{Name: name, Limit: limit, Start: StartFull}, now)
		if err != nil {
			return nil
		}
		return nb
	}
	if old := b.Limit(); math.Abs(old-limit) >= 0.5 {
		ratio := b.Capacity() / old
		_ = b.SetLimitAt(now, limit)
		_ = b.SetCapacityAt(now, limit*ratio)
	}
	return b
}

// pauseLocked pauses the whole lane after a 429, until the advertised
// Retry-After (LaneConfig.PauseDefault without one); a pause already longer
// stays. Retry has no admission control, so nothing pauses it.
func (l *Lane) pauseLocked(now time.Time, h RateLimitHeaders) {
	if l.cfg.Strategy == StrategyRetry {
		return
	}
	wait := l.cfg.PauseDefault
	if h.HasRetryAfter {
		wait = h.RetryAfter
	}
	if until := now.Add(wait); until.After(l.pauseUntil) {
		l.pauseUntil = until
	}
}
