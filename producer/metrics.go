package producer

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	jobs           *prometheus.CounterVec
	republished    prometheus.Counter
	deadLettered   prometheus.Counter
	publishSeconds prometheus.Histogram
	depth          prometheus.Gauge
	inFlight       prometheus.Gauge
	rate           prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmq_producer_jobs_total",
			Help: "Jobs handed to the producer, by result (published, duplicate, unpublished, too_large, rejected_queue_full, rejected_tenant_queue_full, rejected_deadline, broker_unavailable).",
		}, []string{"result"}),
		republished: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "llmq_producer_outbox_republished_total",
			Help: "Jobs the outbox sweeper republished after their publish was not confirmed.",
		}),
		deadLettered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "llmq_producer_outbox_dead_lettered_total",
			Help: "Recorded jobs the outbox sweeper dead-lettered because the broker refuses their message (too large, invalid).",
		}),
		publishSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "llmq_producer_publish_seconds",
			Help:    "Time from publish to broker confirm of one batch of jobs.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		depth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "llmq_queue_depth",
			Help: "Jobs waiting (at the broker or queued in Postgres) or in flight, as last measured by the producer.",
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "llmq_queue_in_flight",
			Help: "Jobs running or retrying, as last measured by the producer.",
		}),
		rate: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "llmq_queue_completion_rate_per_minute",
			Help: "Jobs finished per minute over the producer's rate window.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.jobs, m.republished, m.deadLettered, m.publishSeconds, m.depth, m.inFlight, m.rate} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, fmt.Errorf("producer: register metrics: %w", err)
			}
		}
	}
	return m, nil
}

func (m *metrics) observeQueue(q QueueState) {
	m.depth.Set(float64(q.Depth))
	m.inFlight.Set(float64(q.InFlight))
	m.rate.Set(q.CompletionRatePerMin)
}
