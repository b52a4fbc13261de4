package worker

import (
	"github.com/prometheus/client_golang/prometheus"
)

// scopeMetrics are the series of the tenants' and projects' own quotas
// (docs/metrics.md): labelled by scope ("tenant:<t>", "project:<t>/<p>"),
// only for the configured scopes with a limit that this worker has met,
// so the label set is bounded by the configuration.
type scopeMetrics struct {
	limit    *prometheus.GaugeVec
	level    *prometheus.GaugeVec
	inFlight *prometheus.GaugeVec
	requests *prometheus.CounterVec
	tokens   *prometheus.CounterVec
}

func newScopeMetrics(reg prometheus.Registerer) *scopeMetrics {
	m := &scopeMetrics{
		limit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "llmq_scope_limit", Help: "A tenant's or project's own quota on this worker's share of it, by scope and kind (rpm, tpm, concurrency).",
		}, []string{"scope", "kind"}),
		level: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "llmq_scope_level", Help: "Requests (rpm) or tokens (tpm) left in a tenant's or project's quota bucket on this worker (negative in debt).",
		}, []string{"scope", "kind"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "llmq_scope_in_flight", Help: "Calls of a tenant or project with a concurrency limit admitted on this worker and not done.",
		}, []string{"scope"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmq_scope_requests_total", Help: "Upstream calls of a tenant or project with a quota of its own, by scope.",
		}, []string{"scope"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmq_scope_tokens_total", Help: "Tokens (prompt + completion) settled for a tenant or project with a quota of its own, by scope.",
		}, []string{"scope"}),
	}
	if reg != nil {
		reg.MustRegister(m.limit, m.level, m.inFlight, m.requests, m.tokens)
	}
	return m
}

// countScopes counts a call of a job of scs and the tokens it settled.
func (ss *scopes) countScopes(scs []*scopeQuota, reply Reply) {
	for _, sc := range scs {
		ss.cfg.Metrics.requests.WithLabelValues(sc.name).Inc()
		if reply.Outcome.Class == ClassSuccess {
			ss.cfg.Metrics.tokens.WithLabelValues(sc.name).Add(float64(reply.PromptTokens + reply.CompletionTokens))
		}
	}
}

// observeScopes sets the gauges of every scope made.
func (ss *scopes) observeScopes() {
	now := ss.cfg.Clock.Now()
	m := ss.cfg.Metrics
	for _, sc := range ss.list() {
		share, cfg := sc.shareNow(), sc.limits()
		if sc.rpm != nil {
			m.limit.WithLabelValues(sc.name, "rpm").Set(cfg.RPM * share)
			m.level.WithLabelValues(sc.name, "rpm").Set(sc.rpm.LevelAt(now))
		}
		if sc.tpm != nil {
			m.limit.WithLabelValues(sc.name, "tpm").Set(cfg.TPM * share)
			m.level.WithLabelValues(sc.name, "tpm").Set(sc.tpm.LevelAt(now))
		}
		if cfg.Concurrency > 0 {
			m.limit.WithLabelValues(sc.name, "concurrency").Set(float64(sc.limit.Load()))
			m.inFlight.WithLabelValues(sc.name).Set(float64(sc.inFlight.Load()))
		}
	}
}
