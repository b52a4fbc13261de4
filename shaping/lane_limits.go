package shaping

import (
	"fmt"
	"math"
	"time"
)

// SetLimitsAt gives the lane new configured limits at now, as a restart
// with them would (an operator changed the model's row:
// docs/design/tenants.md#models-as-data). A positive rpm or tpm replaces
// the per-minute limit the lane runs on (its share of it), the capacity
// and, for rpm, the pacing following, unless a limit header set it: the
// provider's headers stay the truth about the minute. A bucket the lane
// lacked is made, full; 0 (unknown) leaves the lane's as it is. A positive
// concurrency is the fixed limit of the rpm and shape strategies (adaptive
// learns its own). Retry has no limits to change.
func (l *Lane) SetLimitsAt(now time.Time, rpm, tpm float64, concurrency int) error {
	if !(rpm >= 0 && rpm < math.Inf(1)) || !(tpm >= 0 && tpm < math.Inf(1)) || concurrency < 0 {
		return fmt.Errorf("%w: lane %q limits must be finite and not negative; got rpm %v, tpm %v, concurrency %d",
			ErrInvalidConfig, l.cfg.Name, rpm, tpm, concurrency)
	}
	if l.cfg.Strategy == StrategyRetry {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if rpm > 0 && !l.rpmQ.fromHeader {
		paced := l.rpm == nil || l.pacer.Interval() == perRequest(l.rpmQ.limit)
		l.rpm = l.learnLocked(now, l.rpm, &l.rpmQ, "rpm", rpm, false, true)
		if paced {
			l.pacer.SetInterval(perRequest(rpm))
		}
	}
	if tpm > 0 && !l.tpmQ.fromHeader && l.cfg.Strategy != StrategyRPM {
		l.tpm = l.learnLocked(now, l.tpm, &l.tpmQ, "tpm", tpm, false, true)
		l.learned = false // a configured quota replaces one learned from 429s
	}
	if concurrency > 0 && l.ctrl == nil {
		// Under what the lane learned of the provider's calls at a time
		// (lane_concurrency.go).
		l.cfg.Concurrency = concurrency
		l.setSlotsLocked(concurrency)
	}
	if l.ctrl != nil {
		l.guideLocked()
	}
	l.wakeLocked()
	return nil
}

// perRequest is the pacing interval of rpm requests a minute (0: none).
func perRequest(rpm float64) time.Duration {
	if rpm <= 0 {
		return 0
	}
	return time.Duration(float64(time.Minute) / rpm)
}
