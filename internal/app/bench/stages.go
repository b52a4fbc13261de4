package bench

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// firstCallMetric is the worker's split of the jobs' times to their first
// call (docs/metrics.md).
const firstCallMetric = "llmq_first_call_stage_seconds"

// firstCallStages are its stages, in order.
var firstCallStages = []string{"wake", "room", "round", "claim", "dispatch", "lane", "record"}

// Stage is one stage of the jobs' times to their first call, as the
// worker's histogram has it: percentiles interpolated within its buckets,
// as Prometheus's histogram_quantile does.
type Stage struct {
	Name     string
	P50, P99 time.Duration
}

// Stages is the worker's split of the jobs' times to their first call.
type Stages struct {
	// Stages in order (wake, room, round, claim, dispatch, lane, record).
	Stages []Stage
	// WokenBy counts the jobs by what woke the claim round that claimed
	// them (notify, ingest, other, tick).
	WokenBy map[string]uint64
	// Jobs is the number of jobs split.
	Jobs uint64
}

// readStages reads the split from the worker's registry.
func readStages(reg *prometheus.Registry) (Stages, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return Stages{}, fmt.Errorf("bench: gather: %w", err)
	}
	st := Stages{WokenBy: map[string]uint64{}}
	buckets := map[string]map[float64]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != firstCallMetric {
			continue
		}
		for _, m := range mf.GetMetric() {
			stage, by := label(m, "stage"), label(m, "woken_by")
			h := m.GetHistogram()
			if stage == firstCallStages[0] {
				st.WokenBy[by] += h.GetSampleCount()
				st.Jobs += h.GetSampleCount()
			}
			if buckets[stage] == nil {
				buckets[stage] = map[float64]uint64{}
			}
			for _, b := range h.GetBucket() {
				buckets[stage][b.GetUpperBound()] += b.GetCumulativeCount()
			}
			buckets[stage][math.Inf(1)] += h.GetSampleCount()
		}
	}
	for _, name := range firstCallStages {
		st.Stages = append(st.Stages, Stage{Name: name, P50: quantile(buckets[name], 0.5), P99: quantile(buckets[name], 0.99)})
	}
	return st, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// quantile is the q-quantile of cumulative bucket counts (by upper bound,
// +Inf included), interpolated linearly within its bucket; past the last
// finite bound, that bound. Written here: client_golang reads a histogram
// but computes no quantile of it, and Prometheus's own histogram_quantile
// lives in its server module (promql), far too large a dependency for
// these twenty lines.
func quantile(cum map[float64]uint64, q float64) time.Duration {
	bounds := make([]float64, 0, len(cum))
	for b := range cum {
		bounds = append(bounds, b)
	}
	slices.Sort(bounds)
	if len(bounds) == 0 || cum[math.Inf(1)] == 0 {
		return 0
	}
	rank := q * float64(cum[math.Inf(1)])
	lower, below := 0.0, uint64(0)
	for _, b := range bounds {
		n := cum[b]
		if float64(n) >= rank {
			if math.IsInf(b, 1) {
				return secsDur(lower)
			}
			return secsDur(lower + (b-lower)*(rank-float64(below))/float64(max(n-below, 1)))
		}
		lower, below = b, n
	}
	return secsDur(lower)
}

func secsDur(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// String is the split on one line, for the progress log.
func (s Stages) String() string {
	var b strings.Builder
	for i, st := range s.Stages {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s/%s", st.Name, stageMs(st.P50), stageMs(st.P99))
	}
	b.WriteString("; woken by ")
	b.WriteString(s.wokenBy())
	return b.String()
}

// wokenBy is WokenBy, the most frequent first.
func (s Stages) wokenBy() string {
	by := make([]string, 0, len(s.WokenBy))
	for k := range s.WokenBy {
		by = append(by, k)
	}
	slices.SortFunc(by, func(x, y string) int { return cmp.Compare(s.WokenBy[y], s.WokenBy[x]) })
	out := make([]string, len(by))
	for i, k := range by {
		out[i] = fmt.Sprintf("%s %d", k, s.WokenBy[k])
	}
	return strings.Join(out, ", ")
}

// firstBucket is the histogram's first bound: a percentile within it is
// shown as at most it.
const firstBucket = 500 * time.Microsecond

// stageMs is a stage's percentile d as the report shows it.
func stageMs(d time.Duration) string {
	if d <= firstBucket {
		return "≤0.5ms"
	}
	return roundMs(d).String()
}

// roundMs rounds d to the millisecond, or to 0.1 ms below 10 ms.
func roundMs(d time.Duration) time.Duration {
	if d < 10*time.Millisecond {
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(time.Millisecond)
}
