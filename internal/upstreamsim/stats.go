package upstreamsim

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Stats is the simulator's accounting since New or the last Reset, as
// served by GET /sim/stats.
type Stats struct {
	// Models holds the accounting per model name.
	Models map[string]ModelStats `json:"models"`
	// Total sums every model (its Timeline sums them per second).
	Total ModelStats `json:"total"`
}

// ModelStats is the accounting of one model.
type ModelStats struct {
	// Accepted counts requests admitted by the limiter (they consumed
	// quota), including those then answered with an injected fault.
	Accepted int64 `json:"accepted"`
	// Succeeded counts requests answered 200.
	Succeeded int64 `json:"succeeded"`
	// RateLimited counts limiter 429s by reason: requests, tokens,
	// too_large, concurrency, burst.
	RateLimited map[string]int64 `json:"rate_limited"`
	// Faults counts injected faults by kind.
	Faults map[string]int64 `json:"faults"`
	// Invalid counts requests refused before admission (400, 404).
	Invalid int64 `json:"invalid"`
	// PromptTokens and CompletionTokens count tokens served synchronously.
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	// BatchLines counts batch lines processed (answered), BatchLinesFailed
	// those of them written to the error file.
	BatchLines       int64 `json:"batch_lines"`
	BatchLinesFailed int64 `json:"batch_lines_failed"`
	// BatchPromptTokens and BatchCompletionTokens count tokens served in
	// batches.
	BatchPromptTokens     int64 `json:"batch_prompt_tokens"`
	BatchCompletionTokens int64 `json:"batch_completion_tokens"`
	// CostUSD is the cost of the tokens served (batch at 50%).
	CostUSD float64 `json:"cost_usd"`
	// Timeline has one point per clock second with accepted requests.
	Timeline []TimelinePoint `json:"timeline"`
}

// TimelinePoint is one second of accepted synchronous traffic.
type TimelinePoint struct {
	// Second is the Unix second.
	Second int64 `json:"second"`
	// Requests counts requests accepted in that second.
	Requests int64 `json:"requests"`
	// PromptTokens and CompletionTokens count the tokens of the requests
	// accepted in that second (served ones only).
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	// Tokens is PromptTokens + CompletionTokens.
	Tokens int64 `json:"tokens"`
}

type modelAcc struct {
	ModelStats
	timeline map[int64]*TimelinePoint
}

type statsCollector struct {
	m      *metrics
	mu     sync.Mutex
	models map[string]*modelAcc
}

func newStatsCollector(m *metrics) *statsCollector {
	return &statsCollector{m: m, models: map[string]*modelAcc{}}
}

func (c *statsCollector) model(name string) *modelAcc {
	a := c.models[name]
	if a == nil {
		a = &modelAcc{timeline: map[int64]*TimelinePoint{}}
		a.RateLimited = map[string]int64{}
		a.Faults = map[string]int64{}
		c.models[name] = a
	}
	return a
}

func (a *modelAcc) point(t time.Time) *TimelinePoint {
	sec := t.Unix()
	p := a.timeline[sec]
	if p == nil {
		p = &TimelinePoint{Second: sec}
		a.timeline[sec] = p
	}
	return p
}

func cost(p Price, prompt, completion int64, factor float64) float64 {
	return factor * (float64(prompt)*max(p.InputPerMTok, 0) + float64(completion)*max(p.OutputPerMTok, 0)) / 1e6
}

// accepted records a served request admitted at t.
func (c *statsCollector) accepted(model string, t time.Time, prompt, completion int, price Price, factor float64) {
	usd := cost(price, int64(prompt), int64(completion), factor)
	c.mu.Lock()
	a := c.model(model)
	a.Accepted++
	a.Succeeded++
	a.PromptTokens += int64(prompt)
	a.CompletionTokens += int64(completion)
	a.CostUSD += usd
	p := a.point(t)
	p.Requests++
	p.PromptTokens += int64(prompt)
	p.CompletionTokens += int64(completion)
	p.Tokens += int64(prompt + completion)
	c.mu.Unlock()
	c.m.requests.WithLabelValues(model, "ok").Inc()
	c.m.tokens.WithLabelValues(model, "prompt").Add(float64(prompt))
	c.m.tokens.WithLabelValues(model, "completion").Add(float64(completion))
	c.m.cost.WithLabelValues(model).Add(usd)
}

// acceptedFault records an admitted request answered with a fault.
func (c *statsCollector) acceptedFault(model string, t time.Time, kind FaultKind) {
	c.mu.Lock()
	a := c.model(model)
	a.Accepted++
	a.Faults[string(kind)]++
	a.point(t).Requests++
	c.mu.Unlock()
	c.m.requests.WithLabelValues(model, "fault").Inc()
	c.m.faults.WithLabelValues(model, string(kind)).Inc()
}

// fault records a fault answered before admission.
func (c *statsCollector) fault(model string, kind FaultKind) {
	c.mu.Lock()
	c.model(model).Faults[string(kind)]++
	c.mu.Unlock()
	c.m.requests.WithLabelValues(model, "fault").Inc()
	c.m.faults.WithLabelValues(model, string(kind)).Inc()
}

func (c *statsCollector) rejected(model string, r Reason) {
	c.mu.Lock()
	c.model(model).RateLimited[string(r)]++
	c.mu.Unlock()
	c.m.requests.WithLabelValues(model, "rate_limited").Inc()
	c.m.rateLimited.WithLabelValues(model, string(r)).Inc()
}

func (c *statsCollector) invalid(model string) {
	c.mu.Lock()
	c.model(model).Invalid++
	c.mu.Unlock()
	c.m.requests.WithLabelValues(model, "invalid").Inc()
}

func (c *statsCollector) batchLine(model string, failed bool, prompt, completion int, price Price) {
	usd := cost(price, int64(prompt), int64(completion), 0.5)
	c.mu.Lock()
	a := c.model(model)
	a.BatchLines++
	if failed {
		a.BatchLinesFailed++
	}
	a.BatchPromptTokens += int64(prompt)
	a.BatchCompletionTokens += int64(completion)
	a.CostUSD += usd
	c.mu.Unlock()
	result := "ok"
	if failed {
		result = "failed"
	}
	c.m.batchLines.WithLabelValues(model, result).Inc()
	c.m.cost.WithLabelValues(model).Add(usd)
}

func (c *statsCollector) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.models)
}

func (c *statsCollector) snapshot() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Stats{Models: make(map[string]ModelStats, len(c.models))}
	tot := &modelAcc{timeline: map[int64]*TimelinePoint{}}
	tot.RateLimited, tot.Faults = map[string]int64{}, map[string]int64{}
	for name, a := range c.models {
		ms := a.ModelStats
		ms.RateLimited = maps.Clone(a.RateLimited)
		ms.Faults = maps.Clone(a.Faults)
		ms.Timeline = timeline(a.timeline)
		st.Models[name] = ms
		t := &tot.ModelStats
		t.Accepted += ms.Accepted
		t.Succeeded += ms.Succeeded
		t.Invalid += ms.Invalid
		t.PromptTokens += ms.PromptTokens
		t.CompletionTokens += ms.CompletionTokens
		t.BatchLines += ms.BatchLines
		t.BatchLinesFailed += ms.BatchLinesFailed
		t.BatchPromptTokens += ms.BatchPromptTokens
		t.BatchCompletionTokens += ms.BatchCompletionTokens
		t.CostUSD += ms.CostUSD
		for k, v := range ms.RateLimited {
			t.RateLimited[k] += v
		}
		for k, v := range ms.Faults {
			t.Faults[k] += v
		}
		for sec, p := range a.timeline {
			q := tot.point(time.Unix(sec, 0))
			q.Requests += p.Requests
			q.PromptTokens += p.PromptTokens
			q.CompletionTokens += p.CompletionTokens
			q.Tokens += p.Tokens
		}
	}
	st.Total = tot.ModelStats
	st.Total.Timeline = timeline(tot.timeline)
	return st
}

func timeline(m map[int64]*TimelinePoint) []TimelinePoint {
	secs := slices.Sorted(maps.Keys(m))
	out := make([]TimelinePoint, len(secs))
	for i, s := range secs {
		out[i] = *m[s]
	}
	return out
}

// metrics are the Prometheus collectors, prefix llmq_sim_.
type metrics struct {
	requests    *prometheus.CounterVec
	rateLimited *prometheus.CounterVec
	faults      *prometheus.CounterVec
	tokens      *prometheus.CounterVec
	batchLines  *prometheus.CounterVec
	cost        *prometheus.CounterVec
	inflight    *prometheus.GaugeVec
}

func newMetrics() *metrics {
	return &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmq_sim_requests_total", Help: "Chat completion requests by model and outcome (ok, rate_limited, fault, invalid).",
		}, []string{"model", "outcome"}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmq_sim_rate_limited_total", Help: "Limiter 429s by model and reason.",
		}, []string{"model", "reason"}),
		faults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmq_sim_faults_total", Help: "Injected faults by model and kind.",
		}, []string{"model", "kind"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmq_sim_tokens_total", Help: "Tokens served synchronously by model and kind (prompt, completion).",
		}, []string{"model", "kind"}),
		batchLines: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmq_sim_batch_lines_total", Help: "Batch lines processed by model and result (ok, failed).",
		}, []string{"model", "result"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmq_sim_cost_usd_total", Help: "Cost of the tokens served, in USD (batch at 50%).",
		}, []string{"model"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "llmq_sim_inflight", Help: "Chat completion requests in flight by model.",
		}, []string{"model"}),
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.requests, m.rateLimited, m.faults, m.tokens, m.batchLines, m.cost, m.inflight} {
		if err := r.Register(c); err != nil {
			return fmt.Errorf("upstreamsim: register metrics: %w", err)
		}
	}
	return nil
}
