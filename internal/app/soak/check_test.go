package soak

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBucketExcess: calls within a tenant's rpm bucket (rpm+1 at once,
// then rpm a minute) are not excess; the ones past it are.
func TestBucketExcess(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	var at []time.Time
	for range 11 {
		at = append(at, t0) // a burst of rpm+1
	}
	require.Zero(t, bucketExcess(at, 10))
	require.Equal(t, 1, bucketExcess(append(at, t0), 10), "one past the burst")
	steady := append([]time.Time(nil), at...)
	for i := 1; i <= 20; i++ {
		steady = append(steady, t0.Add(time.Duration(i)*6*time.Second)) // 10 a minute
	}
	require.Zero(t, bucketExcess(steady, 10))
	require.Equal(t, 1, bucketExcess(append(steady, steady[len(steady)-1]), 10))
	require.Zero(t, bucketExcess(nil, 10))
}

// TestPaidTwice: a job paid twice is explained only by a worker killed
// between its first paid answer and its next call.
func TestPaidTwice(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	s := time.Second
	jobs := map[string]jobCalls{
		"a/once":   {calls: 2, paid: 1, paidAt: []time.Time{t0}, startedAt: []time.Time{t0.Add(-s), t0.Add(-3 * s)}},
		"a/killed": {calls: 2, paid: 2, paidAt: []time.Time{t0, t0.Add(40 * s)}, startedAt: []time.Time{t0.Add(-s), t0.Add(39 * s)}},
		"a/twice":  {calls: 2, paid: 2, paidAt: []time.Time{t0.Add(100 * s), t0.Add(120 * s)}, startedAt: []time.Time{t0.Add(99 * s), t0.Add(119 * s)}},
	}
	all, killed, unexplained := paidTwice(jobs, []time.Time{t0.Add(2 * s), t0.Add(130 * s)})
	require.Equal(t, []string{"a/killed", "a/twice"}, all)
	require.Equal(t, []string{"a/killed"}, killed)
	require.Equal(t, []string{"a/twice"}, unexplained)
}

// TestFailures: each threshold missed is named; a clean report has none.
func TestFailures(t *testing.T) {
	t.Parallel()
	clean := Report{Faults: map[Kind]int{}, Calls: callCounts{Total: 1000, Limited429: 10},
		Procs: []procStats{{Name: "worker-0", PeakMB: 500, MaxLinesPerSec: 20}, {Name: "api-0", PeakMB: 250}}}
	for _, k := range Kinds {
		clean.Faults[k] = 3
	}
	require.Empty(t, clean.Failures(BoundsDefault))

	bad := clean
	bad.Faults = map[Kind]int{KillWorker: 2}
	for _, k := range Kinds[1:] {
		bad.Faults[k] = 3
	}
	bad.Lost, bad.Stuck, bad.Unexplained = []string{"a/1"}, []string{"a/2 queued"}, []string{"a/3"}
	bad.BudgetOverruns = []string{"initech day 0.05 USD, spent 0.06"}
	bad.QuotaExcess = map[string]int{"globex": 2}
	bad.OutageDeadLetters = 1
	bad.Calls = callCounts{Total: 1000, Limited429: 11, NoJob: 1}
	bad.Procs = []procStats{{Name: "worker-0", PeakMB: 513, MaxLinesPerSec: 21, Unasked: 1}, {Name: "api-0", PeakMB: 257}}
	require.Equal(t, []string{
		"1 accepted jobs lost (e.g. a/1)",
		"1 jobs stuck (e.g. a/2 queued)",
		"1 jobs paid twice with no kill between (e.g. a/3)",
		"1 calls named no job",
		"budget overrun: initech day 0.05 USD, spent 0.06",
		"tenant globex: 2 calls past its quota",
		"1 dead letters of jobs that could wait the faults out",
		"provider 429s 1.10% of calls (bound 1.00%)",
		"worker-0: peak RSS 513 MB (bound 512 MB)",
		"worker-0: 21.0 log lines/s over 10 s (bound 20)",
		"worker-0: exited 1 times unasked",
		"api-0: peak RSS 257 MB (bound 256 MB)",
		`fault "kill -9 worker" injected 2 times (at least 3)`,
	}, bad.Failures(BoundsDefault))
}
