package worker

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmq/llmq/shaping"
)

// Capacity normalisation (docs/design/quotas.md, "Normalising capacity"):
// what of a model's provider limit may be handed out, per kind:
//
//	allocatable = limit x health x safety - limit x reserved
//
// It is reported (llmq_capacity_*), not enforced. The terms:
// docs/design/quotas.md#capacity-in-the-worker.

// Defaults of the capacity normalisation (Config).
const (
	CapacitySafetyDefault      = 0.9
	CapacityReservedDefault    = 0.1
	CapacityTailLatencyDefault = 30 * time.Second
)

const (
	// capacityWindow is how many of a model's last calls its health
	// counts.
	capacityWindow = 100
	// capacityMinCalls is how many it needs before health falls.
	capacityMinCalls = 10
)

// health is a model's last calls: whether each failed, and its latency.
type health struct {
	mu      sync.Mutex
	failed  [capacityWindow]bool
	latency [capacityWindow]time.Duration
	n, next int
}

// observe records one call.
func (h *health) observe(failed bool, latency time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failed[h.next], h.latency[h.next] = failed, latency
	h.next = (h.next + 1) % capacityWindow
	h.n = min(h.n+1, capacityWindow)
}

// factor is the health factor in [0, 1] with tail as the p95 latency
// that counts as healthy.
func (h *health) factor(tail time.Duration) float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n < capacityMinCalls {
		return 1
	}
	var failed int
	lat := make([]time.Duration, h.n)
	for i := range h.n {
		if h.failed[i] {
			failed++
		}
		lat[i] = h.latency[i]
	}
	slices.Sort(lat)
	p95 := lat[min(h.n-1, int(math.Ceil(0.95*float64(h.n)))-1)]
	f := 1 - float64(failed)/float64(h.n)
	if p95 > tail {
		f *= float64(tail) / float64(p95)
	}
	return f
}

// allocatable is limit normalised by the health factor and the configured
// safety factor and reserve, never negative.
func allocatable(limit, health, safety, reserved float64) float64 {
	return max(0, limit*(health*safety-reserved))
}

// capacityMetrics are the capacity normalisation's series.
type capacityMetrics struct {
	allocatable *prometheus.GaugeVec
	health      *prometheus.GaugeVec
}

func newCapacityMetrics(reg prometheus.Registerer) *capacityMetrics {
	m := &capacityMetrics{
		allocatable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "llmq_capacity_allocatable", Help: "A model's allocatable capacity on this worker per pool entry (\"\" without a key pool): its lane's limit x health x safety - reserved, by kind (rpm, tpm, concurrency).",
		}, []string{"model", "entry", "kind"}),
		health: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "llmq_capacity_health", Help: "A model's health factor per pool entry: 1 - the share of its last 100 calls that failed (5xx, timeout), lowered by a p95 latency above the tail latency.",
		}, []string{"model", "entry"}),
	}
	if reg != nil {
		reg.MustRegister(m.allocatable, m.health)
	}
	return m
}

// observeHealth records a call of the lane that ended with out after
// latency.
func (l *lane) observeHealth(out Outcome, latency time.Duration) {
	if out.Class == ClassRateLimited {
		return // the quota's doing, not the provider's health
	}
	l.health.observe(out.Status >= 500 || out.Code == "timeout", latency)
}

// observeCapacity sets the capacity gauges of lane l (of a model, or of
// one entry of its pool: capacity is per key and model) from its snapshot
// s.
func (w *Worker) observeCapacity(l *lane, s shaping.Snapshot) {
	h := l.health.factor(w.cfg.CapacityTailLatency)
	safety, reserved := w.cfg.CapacitySafety, max(0, w.cfg.CapacityReserved)
	w.capacity.health.WithLabelValues(l.model, l.entry).Set(h)
	for _, b := range s.Buckets {
		if b.Name == "rpm" || b.Name == "tpm" {
			w.capacity.allocatable.WithLabelValues(l.model, l.entry, b.Name).Set(allocatable(b.Limit, h, safety, reserved))
		}
	}
	w.capacity.allocatable.WithLabelValues(l.model, l.entry, "concurrency").Set(allocatable(float64(s.ConcurrencyLimit), h, safety, reserved))
}

// mean is the mean latency of the model's last calls (0: none yet).
func (h *health) mean() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		return 0
	}
	var sum time.Duration
	for i := range h.n {
		sum += h.latency[i]
	}
	return sum / time.Duration(h.n)
}
