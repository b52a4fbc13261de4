package workload

import (
	"math"
	"slices"
	"time"
)

// Percentile is the nearest-rank q-quantile of the latencies d (0 when d is
// empty), as `llmq demo` and `llmq bench` report them.
func Percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}
