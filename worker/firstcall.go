package worker

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A job's time from its record to its first call, split where it goes
// (llmq_first_call_stage_seconds, docs/metrics.md): when the quota has
// room, that is all it waits (docs/design/queue-of-record.md#waking-the-claims).

// The stages of a job's first call, in order. Each runs from the end of the
// one before (wake from the job's record) to its own mark.
var firstCallStages = [...]string{
	"wake",     // to the wake-up of the claim round that claimed it, or before, to the first round that found its lanes without room or whose claim they filled
	"room",     // to the wake-up of the round that claimed it, when its lanes had no room (their concurrency, quota or a pause)
	"round",    // to that round's claim statement sent
	"claim",    // to the claim's answer
	"dispatch", // to the job in its lane's queue
	"lane",     // to its admission by the lane
	"record",   // to the call recorded (job_attempts.started_at)
}

// What woke a claim round.
const (
	wokenByNotify = "notify" // jobs recorded elsewhere (llmq_job_queued)
	wokenByIngest = "ingest" // jobs this worker recorded
	wokenByOther  = "other"  // a job left, leases were handed back, ...
	wokenByTick   = "tick"   // none: the claim tick, or the first round
)

// claimWake is the first wake-up asked of the claim loop since its last
// round began (zero: none).
type claimWake struct {
	at time.Time
	by string
}

// claimTimes are when a claim's round was woken, and when it sent the
// claim and had its answer; heldSince when a round first found the lanes
// without room since the claim before (zero: it did not).
type claimTimes struct {
	heldSince time.Time
	wake      claimWake
	sent, got time.Time
}

// firstCall is the timeline of a job on the way to its first call.
type firstCall struct {
	claimTimes
	// queued and admitted are when the job went into its lane's queue
	// and was admitted (the last time, when it went more than once).
	queued, admitted time.Time
}

// observe adds the stages of a job recorded at created whose first call
// was recorded at called. A mark before the one it follows (a round woken
// before the job was recorded, which claimed it; lanes without room since
// before) ends its stage at once.
func (f *firstCall) observe(h *prometheus.HistogramVec, created, called time.Time) {
	held := f.wake.at
	if !f.heldSince.IsZero() {
		held = f.heldSince
	}
	marks := [len(firstCallStages)]time.Time{held, f.wake.at, f.sent, f.got, f.queued, f.admitted, called}
	prev := created
	for i, stage := range firstCallStages {
		t := marks[i]
		if t.Before(prev) {
			t = prev
		}
		h.WithLabelValues(stage, f.wake.by).Observe(t.Sub(prev).Seconds())
		prev = t
	}
}
