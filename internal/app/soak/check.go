package soak

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
)

// Bounds are the thresholds a soak is held to.
type Bounds struct {
	// MaxLimited429Share is the most of the calls the simulator's limiter
	// may answer 429 (injected 429 storms apart).
	MaxLimited429Share float64
	// WorkerMB and APIMB bound each process's peak RSS.
	WorkerMB, APIMB float64
	// MaxLinesPerSec bounds each process's log over any 10 s: more is a
	// hot loop.
	MaxLinesPerSec float64
}

// BoundsDefault are the soak's thresholds: at most 1% of calls 429ed by
// the provider's limiter; a worker within 512 MB and an API within 256 MB
// (a worker holds at most MaxInFlight jobs, an API bounds every body);
// at most 20 log lines a second over any 10 s (a fault logs a line per
// incident or per failed job, not per retry of a loop).
var BoundsDefault = Bounds{MaxLimited429Share: 0.01, WorkerMB: 512, APIMB: 256, MaxLinesPerSec: 20}

// Report is what the checker found: a figure per promise.
type Report struct {
	Seed     uint64
	Duration time.Duration
	Command  string
	CPU      string
	// LoadBefore and LoadAfter are the machine's 1-minute load average.
	LoadBefore, LoadAfter string
	Faults                map[Kind]int
	Overlapping, Planned  int

	// Load.
	Submitted map[string]int // by path and answer
	Accepted  int            // jobs llmq took (202, or published)
	Gateway   struct {
		Calls, OK, Failed int
		Longest           time.Duration
	}
	Failed map[string]int // gateway failures by answer

	// Nothing lost, nothing stuck.
	JobsByStatus map[string]int
	Lost         []string // accepted, not in Postgres
	Stuck        []string // not terminal after the drain
	Drain        time.Duration

	// Calls.
	Calls           callCounts
	JobsCalled      int
	PaidTwice       []string // jobs with more than one paid answer
	PaidTwiceKilled int      // of those, a worker killed between the answers
	Unexplained     []string // paid twice, no kill between

	// Budgets and quotas.
	BudgetOverruns []string
	BudgetRows     []string
	QuotaExcess    map[string]int // calls past a tenant's rpm bucket (+1)

	DeadLetters       map[string]int
	OutageDeadLetters int // dead letters whose reason an outage explains
	FailedJobs        map[string]int

	Procs []procStats
}

// deadLetterReasonsExpected are the reasons the soak's load earns by
// design (a tenant whose rejecting budget is spent); any other dead
// letter is one of a job that could have waited the faults out.
var deadLetterReasonsExpected = map[string]bool{"budget_exceeded": true}

// Failures lists the thresholds r misses.
func (r *Report) Failures(b Bounds) []string {
	var f []string
	if len(r.Lost) > 0 {
		f = append(f, fmt.Sprintf("%d accepted jobs lost (e.g. %s)", len(r.Lost), r.Lost[0]))
	}
	if len(r.Stuck) > 0 {
		f = append(f, fmt.Sprintf("%d jobs stuck (e.g. %s)", len(r.Stuck), r.Stuck[0]))
	}
	if len(r.Unexplained) > 0 {
		f = append(f, fmt.Sprintf("%d jobs paid twice with no kill between (e.g. %s)", len(r.Unexplained), r.Unexplained[0]))
	}
	if r.Calls.NoJob > 0 {
		f = append(f, fmt.Sprintf("%d calls named no job", r.Calls.NoJob))
	}
	if len(r.BudgetOverruns) > 0 {
		f = append(f, "budget overrun: "+strings.Join(r.BudgetOverruns, "; "))
	}
	for _, t := range slices.Sorted(maps.Keys(r.QuotaExcess)) {
		if n := r.QuotaExcess[t]; n > 0 {
			f = append(f, fmt.Sprintf("tenant %s: %d calls past its quota", t, n))
		}
	}
	if r.OutageDeadLetters > 0 {
		f = append(f, fmt.Sprintf("%d dead letters of jobs that could wait the faults out", r.OutageDeadLetters))
	}
	if share := r.Limited429Share(); share > b.MaxLimited429Share {
		f = append(f, fmt.Sprintf("provider 429s %.2f%% of calls (bound %.2f%%)", 100*share, 100*b.MaxLimited429Share))
	}
	for _, p := range r.Procs {
		bound := b.WorkerMB
		if strings.HasPrefix(p.Name, "api") {
			bound = b.APIMB
		}
		if p.PeakMB > bound {
			f = append(f, fmt.Sprintf("%s: peak RSS %.0f MB (bound %.0f MB)", p.Name, p.PeakMB, bound))
		}
		if p.MaxLinesPerSec > b.MaxLinesPerSec {
			f = append(f, fmt.Sprintf("%s: %.1f log lines/s over 10 s (bound %.0f)", p.Name, p.MaxLinesPerSec, b.MaxLinesPerSec))
		}
		if p.Unasked > 0 {
			f = append(f, fmt.Sprintf("%s: exited %d times unasked", p.Name, p.Unasked))
		}
	}
	for _, k := range Kinds {
		if r.Faults[k] < 3 {
			f = append(f, fmt.Sprintf("fault %q injected %d times (at least 3)", k, r.Faults[k]))
		}
	}
	return f
}

// Limited429Share is the share of calls the simulator's limiter refused.
func (r *Report) Limited429Share() float64 {
	if r.Calls.Total == 0 {
		return 0
	}
	return float64(r.Calls.Limited429) / float64(r.Calls.Total)
}

// bucketExcess counts the calls at (sorted) past a token bucket of rpm a
// minute holding rpm+1 (the one call a quota may be exceeded by), full at
// the first call: a tenant's quota as the workers keep it.
func bucketExcess(at []time.Time, rpm float64) int {
	if len(at) == 0 || rpm <= 0 {
		return 0
	}
	capacity := rpm + 1
	level, last, excess := capacity, at[0], 0
	for _, t := range at {
		level = min(capacity, level+t.Sub(last).Minutes()*rpm)
		last = t
		if level < 1-1e-9 {
			excess++
			continue
		}
		level--
	}
	return excess
}

// paidTwice sorts the jobs with more than one paid answer into those a
// kill explains (a worker killed between the first paid answer and the
// next call's start: the answer died with its worker before it was
// stored) and the others.
func paidTwice(jobs map[string]jobCalls, kills []time.Time) (all, killed, unexplained []string) {
	for k, j := range jobs {
		if j.paid < 2 {
			continue
		}
		all = append(all, k)
		first := j.paidAt[0]
		var next time.Time
		for _, s := range j.startedAt {
			if s.After(first) {
				next = s
				break
			}
		}
		explained := false
		for _, t := range kills {
			if !t.Before(first.Add(-time.Second)) && (next.IsZero() || t.Before(next)) {
				explained = true
				break
			}
		}
		if explained {
			killed = append(killed, k)
		} else {
			unexplained = append(unexplained, k)
		}
	}
	sort.Strings(all)
	sort.Strings(unexplained)
	return all, killed, unexplained
}

// Print writes the report.
func (r *Report) Print(w io.Writer, b Bounds) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("## Soak, seed %d, %s", r.Seed, r.Duration)
	p("")
	p("- replay: `%s`", r.Command)
	p("- CPU: %s; load average (1 min) %s before, %s after", r.CPU, r.LoadBefore, r.LoadAfter)
	p("- faults: %d planned, %d overlapping another", r.Planned, r.Overlapping)
	for _, k := range Kinds {
		p("  - %s: %d", k, r.Faults[k])
	}
	p("")
	p("| promise | figure |")
	p("| --- | --- |")
	p("| submissions by path and answer | %s |", countsText(r.Submitted))
	p("| jobs accepted / in Postgres by status | %d / %s |", r.Accepted, countsText(r.JobsByStatus))
	p("| lost (accepted, not in Postgres) | %d |", len(r.Lost))
	p("| stuck (not terminal after the drain, which took %s) | %d |", r.Drain.Round(time.Second), len(r.Stuck))
	p("| provider calls: total, paid, jobs called | %d, %d, %d |", r.Calls.Total, r.Calls.Paid, r.JobsCalled)
	p("| calls failed: injected 5xx, refused (outage), injected 429, limiter 429, other | %d, %d, %d, %d, %d |",
		r.Calls.Injected5xx, r.Calls.Refused, r.Calls.Injected429, r.Calls.Limited429, r.Calls.OtherFailed)
	p("| calls naming no job | %d |", r.Calls.NoJob)
	p("| jobs paid twice: all / a kill -9 between / unexplained | %d / %d / %d |", len(r.PaidTwice), r.PaidTwiceKilled, len(r.Unexplained))
	p("| budget rows (limit, spent) / overruns | %s / %d |", strings.Join(r.BudgetRows, "; "), len(r.BudgetOverruns))
	p("| calls past a tenant's quota (+1) | %s |", countsText(r.QuotaExcess))
	p("| provider (limiter) 429s / calls | %.3f%% (bound %.0f%%) |", 100*r.Limited429Share(), 100*b.MaxLimited429Share)
	p("| dead letters by reason | %s |", countsText(r.DeadLetters))
	p("| dead letters an outage explains (could wait) | %d |", r.OutageDeadLetters)
	p("| failed jobs by error | %s |", countsText(r.FailedJobs))
	p("| gateway calls: made, 200, failed (by answer), longest | %d, %d, %d (%s), %s |", r.Gateway.Calls, r.Gateway.OK, r.Gateway.Failed,
		countsText(r.Failed), r.Gateway.Longest.Round(100*time.Millisecond))
	for _, s := range r.Procs {
		p("| %s: starts, peak RSS, log lines, max lines/s over 10 s, unasked exits | %d, %.0f MB, %d, %.1f, %d |",
			s.Name, s.Starts, s.PeakMB, s.Lines, s.MaxLinesPerSec, s.Unasked)
	}
	p("")
	if f := r.Failures(b); len(f) > 0 {
		p("**FAILED** (seed %d):", r.Seed)
		for _, x := range f {
			p("- %s", x)
		}
	} else {
		p("**PASSED** every threshold (seed %d).", r.Seed)
	}
}

// countsText is "a 1, b 2" in key order, "none" when empty.
func countsText[K ~string](m map[K]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
