package bench

import (
	"math"
	"time"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/workload"
)

// point is one second of a run as the simulator counted it.
type point struct {
	t           int // seconds since the start
	requests    int64
	tokens      int64
	rateLimited int64 // 429s in that second (from the samples)
	arrivals    int64 // jobs published in that second
	depth       int64 // jobs published and not yet terminal at its end
	concurrency float64
}

// seconds is the run length in whole seconds.
func (r *result) seconds() int { return int(math.Round(r.spec.duration.Seconds())) }

// series returns one point per second of the run for model ("" = every
// model): the simulator's timeline plus the sampled queue and 429s.
func (r *result) series(model string) []point {
	n := r.seconds()
	out := make([]point, n)
	for i := range out {
		out[i].t = i
	}
	tl := r.stats.Total.Timeline
	if model != "" {
		tl = r.stats.Models[model].Timeline
	}
	for _, p := range tl {
		i := int(p.Second - r.start.Unix())
		if i >= 0 && i < n {
			out[i].requests += p.Requests
			out[i].tokens += p.Tokens
		}
	}
	for k, s := range r.samples {
		i := int(s.at / time.Second)
		if i < 0 || i >= n {
			continue
		}
		out[i].depth = int64(s.arrived - s.terminal)
		out[i].concurrency = s.concurrency
		if k > 0 {
			prev := r.samples[k-1]
			out[i].rateLimited = s.rateLimited - prev.rateLimited
			out[i].arrivals = int64(s.arrived - prev.arrived)
		} else {
			out[i].rateLimited, out[i].arrivals = s.rateLimited, int64(s.arrived)
		}
	}
	return out
}

// served is the tokens the simulator served for model ("" = every model).
func (r *result) served(model string) int64 {
	m := r.stats.Total
	if model != "" {
		m = r.stats.Models[model]
	}
	return m.PromptTokens + m.CompletionTokens
}

// tpmUtilisation is the tokens served over the most the simulator could
// admit in the run: its bucket starts full (one TPM) and refills at TPM
// per minute.
func (r *result) tpmUtilisation(model string, tpm float64) float64 {
	capacity := tpm + tpm*r.spec.duration.Minutes()
	return float64(r.served(model)) / capacity
}

// steadyUtilisation is the tokens served from second from to the end over
// perSecond tokens per second.
func steadyUtilisation(pts []point, from int, perSecond float64) float64 {
	var tok int64
	for _, p := range pts[min(from, len(pts)):] {
		tok += p.tokens
	}
	n := len(pts) - min(from, len(pts))
	if n == 0 {
		return 0
	}
	return float64(tok) / (perSecond * float64(n))
}

// rateLimited is the simulator's 429 count, every model and reason.
func (r *result) rateLimited() int64 { return total(r.stats.Total.RateLimited) }

// count returns the jobs in status.
func (r *result) count(status llmq.Status) int {
	n := 0
	for _, j := range r.jobs {
		if j.status == status {
			n++
		}
	}
	return n
}

// countKind returns the jobs of kind in status.
func (r *result) countKind(status llmq.Status, kind workload.Kind) int {
	n := 0
	for _, j := range r.jobs {
		if j.status == status && j.kind == kind {
			n++
		}
	}
	return n
}

// unfinished counts the jobs of kind ("" = every kind) not in a terminal
// state at the end.
func (r *result) unfinished(kind workload.Kind) int {
	n := 0
	for _, j := range r.jobs {
		if !j.status.Terminal() && (kind == "" || j.kind == kind) {
			n++
		}
	}
	return n
}

// latency returns the q-quantile latency of the succeeded jobs of kind
// ("" = every kind); 0 when none.
func (r *result) latency(kind workload.Kind, q float64) time.Duration {
	var d []time.Duration
	for _, j := range r.jobs {
		if j.status == llmq.StatusSucceeded && (kind == "" || j.kind == kind) {
			d = append(d, j.latency)
		}
	}
	return workload.Percentile(d, q)
}

// usedModel counts the succeeded jobs answered by model.
func (r *result) usedModel(model string) int {
	n := 0
	for _, j := range r.jobs {
		if j.status == llmq.StatusSucceeded && j.usedModel == model {
			n++
		}
	}
	return n
}

// convergence finds the first window of w seconds starting at or after
// from in which the 429s are at most 5% of the admitted requests and the
// tokens served average between lo and hi times limit per second. It
// returns the time from from to that window's start, and false when no
// window qualifies before the run ends.
func convergence(pts []point, from, w int, lo, hi float64, limit func(t int) float64) (time.Duration, bool) {
	for t0 := from; t0+w <= len(pts); t0++ {
		var req, rl, tok int64
		var lim float64
		for _, p := range pts[t0 : t0+w] {
			req += p.requests
			rl += p.rateLimited
			tok += p.tokens
			lim += limit(p.t)
		}
		if float64(rl) <= 0.05*float64(req) && float64(tok) >= lo*lim && float64(tok) <= hi*lim {
			return time.Duration(t0-from) * time.Second, true
		}
	}
	return 0, false
}

// recovery is the time from from until the queue depth is back at or
// below depth; false when it never is.
func recovery(pts []point, from int, depth int64) (time.Duration, bool) {
	for _, p := range pts[min(from, len(pts)):] {
		if p.depth <= depth {
			return time.Duration(p.t-from) * time.Second, true
		}
	}
	return 0, false
}

// movingAverage smooths v over a window of w points ending at each point.
func movingAverage(v []float64, w int) []float64 {
	out := make([]float64, len(v))
	var sum float64
	for i, x := range v {
		sum += x
		if i >= w {
			sum -= v[i-w]
		}
		out[i] = sum / float64(min(i+1, w))
	}
	return out
}
