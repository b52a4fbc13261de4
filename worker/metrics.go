package worker

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the worker's Prometheus series; names and labels are the
// contract of docs/metrics.md.
type metrics struct {
	jobs             *prometheus.CounterVec
	upstream         *prometheus.CounterVec
	tokens           *prometheus.CounterVec
	tenantTokens     *prometheus.CounterVec
	retries          *prometheus.CounterVec
	fallbacks        *prometheus.CounterVec
	entrySwitches    *prometheus.CounterVec
	shapingWait      prometheus.Histogram
	firstCallStage   *prometheus.HistogramVec
	inFlight         prometheus.Gauge
	concurrencyLimit *prometheus.GaugeVec
	bucketLevel      *prometheus.GaugeVec
	quotaShare       *prometheus.GaugeVec
	incident         *prometheus.GaugeVec
	incidents        *prometheus.CounterVec
	jobDuration      prometheus.Histogram
	queueDepth       prometheus.Gauge
	deadLetters      *prometheus.CounterVec
	ingested         *prometheus.CounterVec
	ingestPauses     prometheus.Counter
	handedBack       prometheus.Counter
	dropped          prometheus.Counter
	claimed          prometheus.Counter
	released         prometheus.Counter
	reaped           prometheus.Counter
	leaseLost        prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{}
	m.addCallSeries()
	m.addLaneSeries()
	m.addQueueSeries()
	if reg != nil {
		reg.MustRegister(m.jobs, m.upstream, m.tokens, m.tenantTokens, m.retries, m.fallbacks, m.entrySwitches, m.shapingWait, m.firstCallStage,
			m.inFlight, m.concurrencyLimit, m.bucketLevel, m.quotaShare, m.incident, m.incidents, m.jobDuration, m.queueDepth, m.deadLetters,
			m.ingested, m.ingestPauses, m.handedBack, m.dropped, m.claimed, m.released, m.reaped, m.leaseLost)
	}
	return m
}

// addCallSeries makes the series of upstream calls and their tokens, retries and fallbacks.
func (m *metrics) addCallSeries() {
	m.jobs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "llmq_jobs_total", Help: "Jobs that reached a state, by status.",
	}, []string{"status"})
	m.upstream = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "llmq_upstream_requests_total", Help: "Upstream calls by model, pool entry (\"\" for a model without a key pool) and HTTP status (or error).",
	}, []string{"model", "entry", "code"})
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "llmq_tokens_total", Help: "Tokens settled from upstream usage, by model and kind.",
	}, []string{"model", "kind"})
	m.tenantTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "llmq_tenant_tokens_total", Help: "Tokens (prompt + completion) settled from upstream usage, by configured tenant (other: the rest).",
	}, []string{"tenant"})
	m.retries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "llmq_retries_total", Help: "Attempts retried after a retryable error, by model.",
	}, []string{"model"})
	m.fallbacks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "llmq_fallbacks_total", Help: "Jobs moved to a fallback model.",
	}, []string{"from", "to"})
	m.entrySwitches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "llmq_pool_switches_total", Help: "Jobs moved from one entry of a model's key pool to another (before any fallback model).",
	}, []string{"model", "from", "to"})
	m.shapingWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "llmq_shaping_wait_seconds", Help: "Time a job waited in shaping before its upstream call.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
	})
	m.firstCallStage = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "llmq_first_call_stage_seconds",
		Help:    "A job's time from its record to its first call, by stage (wake, room, round, claim, dispatch, lane, record) and what woke the claim round that claimed it (notify, ingest, other, tick).",
		Buckets: []float64{.0005, .001, .002, .003, .005, .0075, .01, .015, .02, .03, .05, .075, .1, .15, .2, .3, .5, .75, 1, 1.5, 2, 3, 5, 10},
	}, []string{"stage", "woken_by"})
	m.inFlight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "llmq_in_flight", Help: "Upstream calls in flight in this worker.",
	})
	m.jobDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "llmq_job_duration_seconds", Help: "Time from the last claim to the terminal state.",
		Buckets: prometheus.ExponentialBuckets(0.01, 3, 12),
	})
}

// addLaneSeries makes the series of the models' lanes (per pool entry).
func (m *metrics) addLaneSeries() {
	m.concurrencyLimit = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "llmq_concurrency_limit", Help: "Current concurrency limit per model and pool entry.",
	}, []string{"model", "entry"})
	m.bucketLevel = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "llmq_bucket_level", Help: "Tokens left in a shaping bucket of a model's lane (one per pool entry; negative in debt).",
	}, []string{"model", "entry", "bucket"})
	m.quotaShare = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "llmq_quota_share", Help: "Share of the provider's quota this worker runs on, per model and pool entry (1 without the quota ledger).",
	}, []string{"model", "entry"})
	m.incident = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "llmq_upstream_incident", Help: "1 while a model's lane (per pool entry) is held by a provider incident (unreachable, key refused or most calls failing: jobs wait, one probe at a time), else 0.",
	}, []string{"model", "entry"})
	m.incidents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "llmq_upstream_incidents_total", Help: "Provider incidents that held a model's lane (per pool entry), by cause (unreachable, unauthorized, failures).",
	}, []string{"model", "entry", "cause"})
}

// addQueueSeries makes the series of the queue: depth, ingest, claims and hand-backs.
func (m *metrics) addQueueSeries() {
	m.queueDepth = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "llmq_queue_depth", Help: "Jobs waiting: messages in the broker (ready messages or consumer-group lag) plus jobs queued in Postgres.",
	})
	m.deadLetters = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "llmq_dead_letters_total", Help: "Jobs dead-lettered, by reason.",
	}, []string{"reason"})
	m.ingested = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "llmq_ingested_total", Help: "Messages recorded in Postgres, by result (recorded, duplicate).",
	}, []string{"result"})
	m.handedBack = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "llmq_ingest_handed_back_total", Help: "Messages handed back to the broker because they failed to be recorded on their own (a message is dead-lettered after 3 failed deliveries).",
	})
	m.dropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "llmq_ingest_dropped_total", Help: "Messages acked without a record because Postgres refused even their escaped dead letter.",
	})
	m.ingestPauses = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "llmq_ingest_pauses_total", Help: "Times ingestion paused because Postgres held the ingest window of queued jobs.",
	})
	m.claimed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "llmq_claims_total", Help: "Jobs claimed from Postgres by this worker.",
	})
	m.released = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "llmq_released_total", Help: "Jobs this worker handed back to queued (shutdown, a lane paused with no fallback).",
	})
	m.reaped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "llmq_reaped_total", Help: "Jobs whose lease expired, handed back to queued by this worker's reaper.",
	})
	m.leaseLost = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "llmq_lease_lost_total", Help: "Jobs this worker left because their lease was taken over.",
	})
}

// TenantOther is the tenant label of the tenants the configuration does
// not list: the label set stays bounded whoever publishes.
const TenantOther = "other"

// tenantLabel is tenant as a metric label: itself when configured, else
// TenantOther.
func (w *Worker) tenantLabel(tenant string) string {
	if _, ok := w.tenantsNow()[tenant]; ok {
		return tenant
	}
	return TenantOther
}
