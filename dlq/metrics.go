package dlq

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the llmq_dlq_* counters of a Writer and a Service.
type metrics struct {
	recorded        *prometheus.CounterVec
	published       prometheus.Counter
	publishFailures prometheus.Counter
	repaired        prometheus.Counter
	replays         prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		recorded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmq_dlq_letters_recorded_total",
			Help: "Dead letters recorded in Postgres (once per letter, whatever the redeliveries), by reason.",
		}, []string{"reason"}),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "llmq_dlq_letters_published_total",
			Help: "Dead letters whose publish to the dead-letter queue was confirmed.",
		}),
		publishFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "llmq_dlq_publish_failures_total",
			Help: "Failed publishes of dead letters and replays (retried by redelivery or the repair sweep).",
		}),
		repaired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "llmq_dlq_repaired_total",
			Help: "Unconfirmed dead-letter publishes and replays completed by the repair sweep.",
		}),
		replays: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "llmq_dlq_replays_total",
			Help: "Dead letters replayed to the main queue (once per letter).",
		}),
	}
	for _, r := range []Reason{ReasonPoison, ReasonRetriesExhausted, ReasonPermanentError, ReasonExpired} {
		m.recorded.WithLabelValues(string(r))
	}
	if reg == nil {
		return m, nil
	}
	// A Writer and a Service of one process share the collectors.
	register := func(c prometheus.Collector) (prometheus.Collector, error) {
		err := reg.Register(c)
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			return are.ExistingCollector, nil
		}
		if err != nil {
			return nil, fmt.Errorf("dlq: register metrics: %w", err)
		}
		return c, nil
	}
	c, err := register(m.recorded)
	if err != nil {
		return nil, err
	}
	m.recorded = c.(*prometheus.CounterVec)
	for _, p := range []*prometheus.Counter{&m.published, &m.publishFailures, &m.repaired, &m.replays} {
		c, err := register(*p)
		if err != nil {
			return nil, err
		}
		*p = c.(prometheus.Counter)
	}
	return m, nil
}
