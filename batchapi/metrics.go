package batchapi

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	submitted prometheus.Counter
	batches   prometheus.Counter
	results   *prometheus.CounterVec
	open      prometheus.Gauge
}

// newMetrics builds the metrics and registers them with reg (nil: not
// registered; an already registered collector is reused).
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		submitted: prometheus.NewCounter(prometheus.CounterOpts{Name: "llmq_batch_submitted_jobs_total",
			Help: "Jobs submitted inside provider batches."}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{Name: "llmq_batch_submitted_batches_total",
			Help: "Provider batches created."}),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llmq_batch_results_total",
			Help: "Jobs brought home from batches, by outcome (succeeded, live, dead_lettered)."}, []string{"outcome"}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{Name: "llmq_batch_open_batches",
			Help: "Batches not yet brought home."}),
	}
	if reg != nil {
		m.submitted = register(reg, m.submitted)
		m.batches = register(reg, m.batches)
		m.results = register(reg, m.results)
		m.open = register(reg, m.open)
	}
	return m
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}
