package api

import (
	"net/http"
	"time"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// Call is one upstream call of a job as llmq shows it (schema JobCall), in
// GET /v1/jobs/{id}'s calls.
type Call struct {
	// Seq numbers the job's calls for good; Attempt is the call's number
	// in the job's current run (a replayed dead letter counts from 1
	// again).
	Seq     int    `json:"seq"`
	Attempt int    `json:"attempt"`
	Model   string `json:"model"`
	// Entry names the entry of the model's key pool that made the call;
	// absent for a model without a pool.
	Entry string `json:"entry,omitempty"`
	// QuotaWaitMS is how long the job waited for admission (quota,
	// concurrency, pacing) before the call; BackoffMS how long it waited
	// out a backoff since its previous call.
	QuotaWaitMS int64      `json:"quota_wait_ms"`
	BackoffMS   int64      `json:"backoff_ms"`
	StartedAt   time.Time  `json:"started_at"`
	FinishedAt  *time.Time `json:"finished_at"`
	// Status is the HTTP status of the answer; 0 when none arrived.
	Status int `json:"status"`
	// Outcome is success, rate_limited, retryable, permanent, or
	// unanswered (in flight, or its holder stopped first).
	Outcome   string `json:"outcome"`
	ErrorCode string `json:"error_code,omitempty"`
	// Tokens the answer counted.
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	// RetryAfterMS is the wait the answer asked for; absent when none.
	RetryAfterMS *int64 `json:"retry_after_ms,omitempty"`
}

// OutcomeUnanswered is the outcome of a call with no recorded answer.
const OutcomeUnanswered = "unanswered"

// CallViews are the calls as llmq shows them.
func CallViews(as []store.Attempt) []Call {
	out := make([]Call, len(as))
	for i, a := range as {
		c := Call{Seq: a.Seq, Attempt: a.Attempt, Model: a.Model, Entry: a.Entry, QuotaWaitMS: a.QuotaWait.Milliseconds(),
			BackoffMS: a.Backoff.Milliseconds(), StartedAt: a.StartedAt, FinishedAt: a.FinishedAt, Status: a.Status,
			Outcome: a.Outcome, ErrorCode: a.ErrorCode, PromptTokens: a.PromptTokens, CompletionTokens: a.CompletionTokens}
		if c.Outcome == "" {
			c.Outcome = OutcomeUnanswered
		}
		if a.RetryAfter != nil {
			ms := a.RetryAfter.Milliseconds()
			c.RetryAfterMS = &ms
		}
		out[i] = c
	}
	return out
}

// Model statistics windows (GET /v1/stats/models?window=).
const (
	StatsWindowDefault = time.Hour
	StatsWindowMax     = 24 * time.Hour
)

// ModelStats is GET /v1/stats/models: the upstream calls of the jobs in
// scope, per model and minute (schema ModelStats).
type ModelStats struct {
	// Since and Until bound the window: Since is the first minute shown,
	// Until the end of the last.
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Data has one entry per model called in the window, by name.
	Data []ModelStat `json:"data"`
}

// ModelStat is one model's calls (schema ModelStat).
type ModelStat struct {
	Model  string      `json:"model"`
	Limits ModelLimits `json:"limits"`
	// InFlight counts the calls not answered yet.
	InFlight int64 `json:"in_flight"`
	// Minutes has one entry per minute of the window, oldest first.
	Minutes []ModelMinute `json:"minutes"`
}

// ModelLimits are the limits in force for a model: configured, else the
// last x-ratelimit-limit-* headers an answer in the window stated; 0 =
// unknown (RPM, TPM) or the shaping default (concurrency).
type ModelLimits struct {
	RPM float64 `json:"rpm"`
	// RPMSource and TPMSource say where a limit comes from: configured,
	// headers or none.
	RPMSource   string  `json:"rpm_source"`
	TPM         float64 `json:"tpm"`
	TPMSource   string  `json:"tpm_source"`
	Concurrency int     `json:"concurrency"`
}

// ModelMinute is the calls of one model that started in one minute.
type ModelMinute struct {
	Minute time.Time `json:"minute"`
	// Requests counts the calls; RateLimited the 429s; Failed the other
	// answers that were not a success (5xx, timeouts, 4xx).
	Requests    int64 `json:"requests"`
	RateLimited int64 `json:"rate_limited"`
	Failed      int64 `json:"failed"`
	// Tokens counts prompt and completion tokens of the answers.
	Tokens int64 `json:"tokens"`
	// QuotaWait* are the waits for admission before the calls, in
	// milliseconds: mean, median and 95th percentile (the percentiles to
	// the upper bound of their 1-2-5 bucket, capped at the longest wait).
	QuotaWaitMeanMS float64 `json:"quota_wait_mean_ms"`
	QuotaWaitP50MS  float64 `json:"quota_wait_p50_ms"`
	QuotaWaitP95MS  float64 `json:"quota_wait_p95_ms"`
	// Concurrency is the mean number of calls in flight over the minute.
	Concurrency float64 `json:"concurrency"`
}

// Sources of a limit in force.
const (
	LimitConfigured = "configured"
	LimitHeaders    = "headers"
	LimitNone       = "none"
)

// limit is the limit in force: configured, else learned, else none.
func limit(configured, learned float64) (float64, string) {
	switch {
	case configured > 0:
		return configured, LimitConfigured
	case learned > 0:
		return learned, LimitHeaders
	}
	return 0, LimitNone
}

// ModelStatsView is the window [since, now]'s statistics of calls, with
// a point for every minute of it (none: zeros) and the limits of cat.
func ModelStatsView(cat llmq.Catalog, calls []store.ModelCalls, since, now time.Time) ModelStats {
	first, last := since.UTC().Truncate(time.Minute), now.UTC().Truncate(time.Minute)
	out := ModelStats{Since: first, Until: last.Add(time.Minute), Data: []ModelStat{}}
	for _, mc := range calls {
		m := cat.Lookup(mc.Model)
		st := ModelStat{Model: mc.Model, InFlight: mc.InFlight, Limits: ModelLimits{Concurrency: m.Concurrency}}
		st.Limits.RPM, st.Limits.RPMSource = limit(m.RPM, mc.LimitRequests)
		st.Limits.TPM, st.Limits.TPMSource = limit(m.TPM, mc.LimitTokens)
		byMinute := make(map[time.Time]store.ModelMinute, len(mc.Minutes))
		for _, mm := range mc.Minutes {
			byMinute[mm.Minute] = mm
		}
		for t := first; !t.After(last); t = t.Add(time.Minute) {
			mm := byMinute[t]
			st.Minutes = append(st.Minutes, ModelMinute{Minute: t, Requests: mm.Requests, RateLimited: mm.RateLimited,
				Failed: mm.Failed, Tokens: mm.Tokens, QuotaWaitMeanMS: ms(mm.QuotaWaitMean), QuotaWaitP50MS: ms(mm.QuotaWaitP50),
				QuotaWaitP95MS: ms(mm.QuotaWaitP95), Concurrency: mm.Concurrency})
		}
		out.Data = append(out.Data, st)
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// modelStats answers GET /v1/stats/models?window=: the calls of the jobs
// in scope per model and minute over the window (default an hour).
func (sh *statsHandler) modelStats(w http.ResponseWriter, r *http.Request) {
	s, _ := scopeOf(r)
	now, since, ok := sh.statsWindow(w, r)
	if !ok {
		return
	}
	calls, err := sh.store.ModelStats(r.Context(), s.tenant, since)
	if err != nil {
		sh.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ModelStatsView(sh.catalog(), calls, since, now))
}

// statsWindow reads a statistics endpoint's ?window= (default an hour):
// now, and since, the first minute of the window. A bad window is answered
// 400 naming the parameter, and ok is false.
func (sh *statsHandler) statsWindow(w http.ResponseWriter, r *http.Request) (now, since time.Time, ok bool) {
	window := StatsWindowDefault
	if v := r.URL.Query().Get("window"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Minute || d > StatsWindowMax {
			writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: "window",
				Message: "window must be a duration from 1m to 24h, such as 15m or 1h"})
			return now, since, false
		}
		window = d
	}
	now = sh.clock.Now()
	return now, now.Add(-window).UTC().Truncate(time.Minute), true
}
