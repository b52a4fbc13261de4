package api

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmq/llmq/internal/background"
	"github.com/llmq/llmq/internal/tracing"
	"github.com/llmq/llmq/producer"
)

//go:embed openapi.yaml
var openAPIDocument []byte

// OpenAPI returns the embedded OpenAPI 3 document (YAML).
func OpenAPI() []byte { return append([]byte(nil), openAPIDocument...) }

// API is the HTTP handler of llmq's API. It is safe for concurrent use.
type API struct {
	cfg Config
	replies
	// admission reads and checks the jobs of POST /v1/jobs and the
	// gateway's calls.
	admission
	// door authenticates and limits every request (auth.go).
	*door
	// gateway serves gateway mode (gateway_handler.go).
	*gateway
	mux      *http.ServeMux
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// limitSharer runs the door's exchange of its limits with the other
	// replicas (doorshare.go); listener the gateway's listening
	// connection (gateway_wait.go).
	limitSharer background.Runner
	listener    background.Runner
}

// New returns the API handler.
func New(cfg Config) (*API, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	a := &API{
		cfg:     cfg,
		replies: replies{log: cfg.Logger},
		mux:     http.NewServeMux(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmq_api_requests_total",
			Help: "HTTP API requests by route pattern and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "llmq_api_request_duration_seconds",
			Help:    "HTTP API request latency by route pattern.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"route"}),
	}
	a.door = newDoor(cfg, a.replies, a.tenants)
	a.cfg.Keys, a.cfg.OperatorKeys = nil, nil
	a.admission = admission{replies: a.replies, maxBodyBytes: cfg.MaxBodyBytes, maxMessageBytes: cfg.MaxMessageBytes,
		usage: cfg.Usage, tenants: a.tenants, catalog: a.catalog, clock: cfg.Clock}
	a.gateway = &gateway{admission: a.admission, limited: a.door.limited,
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "llmq_gateway_waiting_callers",
			Help: "Gateway calls (POST /v1/chat/completions) waiting for their job to end.",
		}),
		cfg: gatewaySettings{Gateway: cfg.Gateway, Producer: cfg.Producer, Store: cfg.Store, Streams: cfg.Streams,
			JobsDone: cfg.JobsDone, Clock: cfg.Clock, MaxBodyBytes: cfg.MaxBodyBytes, MaxMessageBytes: cfg.MaxMessageBytes,
			RetryAfterUnavailable: cfg.RetryAfterUnavailable}}
	collectors := []prometheus.Collector{a.requests, a.duration, a.door.limited}
	if cfg.JobsDone != nil {
		collectors = append(collectors, a.gateway.waiting)
	}
	if cfg.Limits != nil {
		collectors = append(collectors, a.limitSyncs)
	}
	if cfg.Registerer != nil {
		for _, c := range collectors {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("api: register metrics: %w", err)
			}
		}
	}
	a.routes()
	return a, nil
}

func (a *API) routes() {
	j := &jobsHandler{admission: a.admission, producer: a.cfg.Producer, store: a.cfg.Store, retryAfter: a.cfg.RetryAfterUnavailable}
	a.mux.Handle("POST /v1/jobs", a.authed(j.postJobs))
	a.mux.Handle("GET /v1/jobs", a.authed(j.listJobs))
	a.mux.Handle("GET /v1/jobs/{id}", a.authed(j.getJob))
	a.mux.Handle("DELETE /v1/jobs/{id}", a.authed(j.cancelJob))
	a.mux.Handle("GET /v1/queue", a.authed(j.queue))
	a.mux.HandleFunc("GET /healthz", healthz)
	a.mux.HandleFunc("GET /readyz", a.readyz)
	a.mux.HandleFunc("GET /openapi.yaml", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(openAPIDocument)
	})
	if a.cfg.JobsDone != nil {
		a.mux.Handle("POST /v1/chat/completions", refuseHops(a.authedLimits(a.gateway.chatCompletions, writeOpenAIError, true)))
		a.mux.Handle("GET /v1/models", refuseHops(a.authedLimits(a.gateway.models, writeOpenAIError, true)))
	}
	a.mux.Handle("GET /v1/me", a.authed(me))
	st := &statsHandler{replies: a.replies, store: a.cfg.Store, clock: a.cfg.Clock, catalog: a.catalog}
	a.mux.Handle("GET /v1/stats/jobs", a.authed(st.jobStats))
	a.mux.Handle("GET /v1/stats/models", a.authed(st.modelStats))
	a.mux.Handle("GET /v1/stats/arrivals", a.authed(st.arrivals))
	if a.cfg.Usage != nil {
		u := &usageHandler{replies: a.replies, store: a.cfg.Usage, tenants: a.tenants}
		a.mux.Handle("GET /v1/usage", a.authed(u.usage))
	}
	if a.cfg.Batches != nil {
		b := &batchHandler{replies: a.replies, store: a.cfg.Batches, cancel: a.cfg.CancelBatch, retryAfter: a.cfg.RetryAfterUnavailable}
		a.mux.Handle("GET /v1/batches", a.authed(a.operatorOnly(b.listBatches)))
		a.mux.Handle("GET /v1/batches/{id}", a.authed(a.operatorOnly(b.getBatch)))
		a.mux.Handle("POST /v1/batches/{id}/cancel", a.authed(a.operatorOnly(b.cancelBatch)))
	}
	if a.cfg.Notifications != nil {
		n := &notificationHandler{replies: a.replies, store: a.cfg.Notifications, clock: a.cfg.Clock}
		a.mux.Handle("GET /v1/notifications", a.authed(n.listNotifications))
		a.mux.Handle("POST /v1/notifications/{event_id}/replay", a.authed(n.replayNotification))
		a.mux.Handle("POST /v1/notifications/replay", a.authed(n.replayDeadNotifications))
	}
	if a.cfg.DeadLetterService != nil {
		d := &deadLetters{replies: a.replies, letters: a.cfg.DeadLetterService, retryAfter: a.cfg.RetryAfterUnavailable}
		a.mux.Handle("GET /v1/dead-letters", a.authed(d.listDeadLetters))
		a.mux.Handle("GET /v1/dead-letters/{id}", a.authed(d.getDeadLetter))
		a.mux.Handle("POST /v1/dead-letters/{id}/replay", a.authed(d.replayDeadLetter))
		a.mux.Handle("GET /v1/dead-letters/reasons", a.authed(d.deadLetterReasons))
		a.mux.Handle("POST /v1/dead-letters/replay", a.authed(d.replayDeadLetters))
		a.mux.Handle("POST /v1/dead-letters/purge", a.authed(d.purgeDeadLetters))
	}
	a.adminRoutes()
}

// adminRoutes mounts the admin API (operator keys only).
func (a *API) adminRoutes() {
	h := func(f http.HandlerFunc) http.Handler { return a.authed(a.adminOnly(f)) }
	if a.cfg.Tenancy != nil {
		t := &tenantAdmin{replies: a.replies, store: a.cfg.TenancyStore, clock: a.cfg.Clock}
		a.mux.Handle("GET /v1/admin/tenants", h(t.listTenants))
		a.mux.Handle("POST /v1/admin/tenants", h(t.createTenant))
		a.mux.Handle("GET /v1/admin/tenants/{tenant}", h(t.getTenant))
		a.mux.Handle("PUT /v1/admin/tenants/{tenant}", h(t.updateTenant))
		a.mux.Handle("DELETE /v1/admin/tenants/{tenant}", h(t.deleteTenant))
		a.mux.Handle("POST /v1/admin/tenants/{tenant}/pause", h(t.pauseTenant(true)))
		a.mux.Handle("POST /v1/admin/tenants/{tenant}/resume", h(t.pauseTenant(false)))
		a.mux.Handle("GET /v1/admin/tenants/{tenant}/projects/{project}", h(t.getProject))
		a.mux.Handle("PUT /v1/admin/tenants/{tenant}/projects/{project}", h(t.putProject))
		a.mux.Handle("DELETE /v1/admin/tenants/{tenant}/projects/{project}", h(t.deleteProject))
		a.mux.Handle("POST /v1/admin/tenants/{tenant}/projects/{project}/pause", h(t.pauseProject(true)))
		a.mux.Handle("POST /v1/admin/tenants/{tenant}/projects/{project}/resume", h(t.pauseProject(false)))
		a.mux.Handle("GET /v1/admin/keys", h(t.listKeys))
		a.mux.Handle("POST /v1/admin/keys", h(t.createKey))
		a.mux.Handle("GET /v1/admin/keys/{key}", h(t.getKey))
		a.mux.Handle("POST /v1/admin/keys/{key}/revoke", h(t.revokeKey))
		a.mux.Handle("GET /v1/admin/audit", h(t.listAudit))
		m := &modelAdmin{replies: a.replies, store: a.cfg.TenancyStore}
		a.mux.Handle("GET /v1/admin/models", h(m.listModels))
		a.mux.Handle("POST /v1/admin/models", h(func(w http.ResponseWriter, r *http.Request) { m.putModel(w, r, "") }))
		a.mux.Handle("GET /v1/admin/models/{model...}", h(m.getModel))
		a.mux.Handle("PUT /v1/admin/models/{model...}", h(func(w http.ResponseWriter, r *http.Request) { m.putModel(w, r, r.PathValue("model")) }))
		a.mux.Handle("DELETE /v1/admin/models/{model...}", h(m.deleteModel))
	}
	if a.cfg.TenantNotifications != nil {
		n := &tenantNotifications{replies: a.replies, store: a.cfg.TenantNotifications}
		a.mux.Handle("GET /v1/admin/notifications", h(n.listTenantNotifications))
		a.mux.Handle("GET /v1/admin/tenants/{tenant}/notifications", h(n.getTenantNotifications))
		a.mux.Handle("PUT /v1/admin/tenants/{tenant}/notifications", h(n.putTenantNotifications))
		a.mux.Handle("DELETE /v1/admin/tenants/{tenant}/notifications", h(n.deleteTenantNotifications))
		a.mux.Handle("POST /v1/admin/tenants/{tenant}/notifications/secrets", h(n.rotateWebhookSecret))
		a.mux.Handle("DELETE /v1/admin/tenants/{tenant}/notifications/secrets/previous", h(n.endSecretRotation))
	}
}

// ServeHTTP routes the request. Unknown paths answer 404 and known paths
// with another method 405 (with Allow), both as JSON errors.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	// Every answer is for its requester only and is what it says it is.
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	h, pattern := a.mux.Handler(r)
	rw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	route := pattern
	if pattern == "" {
		route = "unmatched"
	}
	r, span := tracing.StartServer(r, route)
	if pattern == "" {
		a.unmatched(h)(rw, r)
	} else {
		// mux.ServeHTTP (not h) so that r.PathValue is set.
		a.mux.ServeHTTP(rw, r)
	}
	a.requests.WithLabelValues(route, strconv.Itoa(rw.status)).Inc()
	tracing.EndServer(span, rw.status)
	tracing.Observe(r.Context(), a.duration.WithLabelValues(route), time.Since(start).Seconds())
}

// unmatched turns the mux's plain-text 404 and 405 into JSON errors.
func (a *API) unmatched(mux http.Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		probe := &headerProbe{header: http.Header{}}
		mux.ServeHTTP(probe, r)
		if probe.status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", probe.header.Get("Allow"))
			writeError(w, http.StatusMethodNotAllowed, Error{Code: CodeMethodNotAllowed,
				Message: fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, probe.header.Get("Allow"))})
			return
		}
		writeError(w, http.StatusNotFound, Error{Code: CodeNotFound, Message: "no such endpoint: " + r.URL.Path})
	}
}

// headerProbe records what the mux's fallback handler would answer.
type headerProbe struct {
	header http.Header
	status int
}

func (p *headerProbe) Header() http.Header { return p.header }
func (p *headerProbe) Write(b []byte) (int, error) {
	if p.status == 0 {
		p.status = http.StatusOK
	}
	return len(b), nil
}
func (p *headerProbe) WriteHeader(status int) {
	if p.status == 0 {
		p.status = status
	}
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func bearer(h string) (string, bool) {
	scheme, key, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	key = strings.TrimSpace(key)
	return key, key != ""
}

func healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

type readyBody struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
}

// readyz checks the database (ping) and the broker (a queue measurement).
// It is not authenticated: it says "unavailable" and logs the cause, never
// showing a dial error (addresses, user names) to whoever asks.
func (a *API) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	body := readyBody{Status: "ready", Checks: map[string]string{"database": "ok", "broker": "ok"}}
	if err := a.cfg.Store.Ping(ctx); err != nil {
		body.Status, body.Checks["database"] = "unavailable", "unavailable"
		a.log.Warn("api: not ready: database", slog.String("error", err.Error()))
	}
	if _, err := a.cfg.Producer.Queue(ctx); errors.Is(err, producer.ErrBrokerUnavailable) {
		body.Status, body.Checks["broker"] = "unavailable", "unavailable"
		a.log.Warn("api: not ready: broker", slog.String("error", err.Error()))
	}
	if body.Status != "ready" {
		setRetryAfter(w, a.cfg.RetryAfterUnavailable)
		writeJSON(w, http.StatusServiceUnavailable, body)
		return
	}
	writeJSON(w, http.StatusOK, body)
}

// replies is what every handler type shares: the logger of the errors it
// answers 500 to.
type replies struct{ log *slog.Logger }

// internalError logs err and answers 500.
func (p replies) internalError(w http.ResponseWriter, r *http.Request, err error) {
	p.log.Error("api: request failed", slog.String("method", r.Method), slog.String("path", r.URL.Path),
		slog.String("error", err.Error()))
	writeError(w, http.StatusInternalServerError, Error{Code: CodeInternal, Message: "internal error"})
}

// knownCallers is the size of the limiter set of n configured keys or
// tenants: all of them, so that the set never forgets one; with the
// tenancy kept as data, whose keys and tenants change at run time,
// RateLimits.MaxClients of them, the least recently seen forgotten first.
func knownCallers(cfg Config, n int) int {
	if cfg.Tenancy != nil {
		return max(n, cfg.RateLimits.MaxClients)
	}
	return max(1, n)
}
