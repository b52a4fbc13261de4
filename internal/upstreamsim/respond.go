package upstreamsim

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	openAIVersion  = "2020-10-01"
	rateLimitsLink = "Visit https://platform.openai.com/account/rate-limits to learn more."
)

func (s *Server) routes(metricsHandler http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.authed(s.handleChat))
	mux.HandleFunc("POST /openai/deployments/{deployment}/chat/completions", s.authed(s.handleChat))
	mux.HandleFunc("GET /v1/models", s.authed(s.handleListModels))
	mux.HandleFunc("GET /v1/models/{model}", s.authed(s.handleGetModel))
	mux.HandleFunc("POST /v1/files", s.authed(s.batches.handleUpload))
	mux.HandleFunc("GET /v1/files", s.authed(s.batches.handleListFiles))
	mux.HandleFunc("GET /v1/files/{id}", s.authed(s.batches.handleGetFile))
	mux.HandleFunc("GET /v1/files/{id}/content", s.authed(s.batches.handleFileContent))
	mux.HandleFunc("DELETE /v1/files/{id}", s.authed(s.batches.handleDeleteFile))
	mux.HandleFunc("POST /v1/batches", s.authed(s.batches.handleCreate))
	mux.HandleFunc("GET /v1/batches", s.authed(s.batches.handleList))
	mux.HandleFunc("GET /v1/batches/{id}", s.authed(s.batches.handleGet))
	mux.HandleFunc("POST /v1/batches/{id}/cancel", s.authed(s.batches.handleCancel))
	mux.HandleFunc("GET /sim/stats", s.handleStats)
	mux.HandleFunc("POST /sim/reset", s.handleReset)
	mux.HandleFunc("GET /sim/limits", s.handleGetLimits)
	mux.HandleFunc("POST /sim/limits", s.handleSetLimits)
	mux.Handle("GET /metrics", metricsHandler)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.dialect.commonHeaders(w, newRequestID())
		writeError(w, http.StatusNotFound, apiError{
			Message: fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path),
			Type:    "invalid_request_error",
		})
	})
	return mux
}

// apiError is the OpenAI error envelope's inner object. Param and Code are
// null when empty unless paramEmpty / codeString say otherwise.
type apiError struct {
	Message string
	Type    string
	Param   string
	Code    string
	// paramEmpty sends "param":"" instead of null (DashScope).
	paramEmpty bool
	// noType drops "type" (Azure).
	noType bool
	// requestID adds a top-level request_id (DashScope).
	requestID string
}

func (e apiError) MarshalJSON() ([]byte, error) {
	var param, code, typ any
	if e.Param != "" || e.paramEmpty {
		param = e.Param
	}
	if e.Code != "" {
		code = e.Code
	}
	if !e.noType {
		typ = e.Type
	}
	inner := struct {
		Message string `json:"message"`
		Type    any    `json:"type,omitempty"`
		Param   any    `json:"param"`
		Code    any    `json:"code"`
	}{e.Message, typ, param, code}
	if e.noType {
		return json.Marshal(struct {
			Code    any    `json:"code"`
			Message string `json:"message"`
		}{code, e.Message})
	}
	return json.Marshal(inner)
}

func writeError(w http.ResponseWriter, status int, e apiError) {
	body := struct {
		Error     apiError `json:"error"`
		RequestID string   `json:"request_id,omitempty"`
	}{e, e.requestID}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(len(b) + 1)}
	w.WriteHeader(status)
	b = append(b, '\n')
	_, _ = w.Write(b)
}

func newRequestID() string {
	var b [16]byte
	putUint64(b[:8], rand.Uint64())
	putUint64(b[8:], rand.Uint64())
	return "req_" + hex.EncodeToString(b[:])
}

func newID(prefix string, n int) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, len(prefix)+n)
	copy(b, prefix)
	for i := len(prefix); i < len(b); i++ {
		b[i] = alphabet[rand.IntN(len(alphabet))]
	}
	return string(b)
}

func putUint64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}

// dialect is how the simulator words its answers: the headers every answer
// carries and the 429s of the provider it plays (Config.Mode).
type dialect struct{ cfg Config }

func (d dialect) commonHeaders(w http.ResponseWriter, reqID string) {
	h := w.Header()
	h["X-Request-Id"] = []string{reqID}
	h["Openai-Version"] = []string{openAIVersion}
	h["Openai-Organization"] = []string{d.cfg.Organization}
}

func setProcessingMS(w http.ResponseWriter, d time.Duration) {
	w.Header()["Openai-Processing-Ms"] = []string{strconv.FormatInt(max(d.Milliseconds(), 0), 10)}
}

// formatDuration formats d as Go's time.Duration.String does, rounded to
// the millisecond, as OpenAI does in its reset headers and 429 messages.
func formatDuration(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	r := d.Round(time.Millisecond)
	if r == 0 {
		r = time.Millisecond
	}
	return r.String()
}

// rateLimitHeaders sets the x-ratelimit-* headers of d, unless the
// configuration sends none.
func (d dialect) rateLimitHeaders(w http.ResponseWriter, dec Decision) {
	if d.cfg.RateLimitHeaders == HeadersNone {
		return
	}
	h := w.Header()
	if dec.Limits.RPM > 0 {
		h["X-Ratelimit-Limit-Requests"] = []string{strconv.FormatInt(dec.Limits.RPM, 10)}
		h["X-Ratelimit-Remaining-Requests"] = []string{strconv.FormatInt(dec.RemainingRequests, 10)}
		h["X-Ratelimit-Reset-Requests"] = []string{formatDuration(dec.ResetRequests)}
	}
	if dec.Limits.TPM > 0 {
		h["X-Ratelimit-Limit-Tokens"] = []string{strconv.FormatInt(dec.Limits.TPM, 10)}
		h["X-Ratelimit-Remaining-Tokens"] = []string{strconv.FormatInt(dec.RemainingTokens, 10)}
		h["X-Ratelimit-Reset-Tokens"] = []string{formatDuration(dec.ResetTokens)}
	}
}

// retryAfterHeaders sets retry-after (whole seconds, rounded up, at least 1)
// and, in Azure mode, retry-after-ms.
func (d dialect) retryAfterHeaders(w http.ResponseWriter, wait time.Duration) {
	if d.cfg.OmitRetryAfterOn429 {
		return
	}
	secs := max(int64(math.Ceil(wait.Seconds())), 1)
	w.Header()["Retry-After"] = []string{strconv.FormatInt(secs, 10)}
	if d.cfg.Mode == ModeAzure {
		w.Header()["Retry-After-Ms"] = []string{strconv.FormatInt(max(int64(math.Ceil(float64(wait)/float64(time.Millisecond))), 1), 10)}
	}
}

// rateLimitError builds the 429 body for a limiter rejection.
func (d dialect) rateLimitError(model string, dec Decision, requested int64, reqID, apiVersion string) apiError {
	org := d.cfg.Organization
	wait := formatDuration(dec.RetryAfter)
	switch d.cfg.Mode {
	case ModeDashScope:
		switch dec.Reason {
		case ReasonTokens, ReasonTooLarge:
			return apiError{Message: "Allocated quota exceeded, please increase your quota limit.", Type: "insufficient_quota", Code: "insufficient_quota", paramEmpty: true, requestID: reqID}
		case ReasonBurst:
			return dashScopeBurstError(reqID)
		default:
			return apiError{Message: "Requests rate limit exceeded, try again later.", Type: "limit_requests", Code: "limit_requests", paramEmpty: true, requestID: reqID}
		}
	case ModeAzure:
		kind := "call rate limit"
		if dec.Reason == ReasonTokens || dec.Reason == ReasonTooLarge {
			kind = "token rate limit"
		}
		secs := max(int64(math.Ceil(dec.RetryAfter.Seconds())), 1)
		return apiError{
			Code: "429",
			Message: fmt.Sprintf("Requests to the ChatCompletions_Create Operation under Azure OpenAI API version %s have exceeded %s of your current OpenAI S0 pricing tier. Please retry after %d seconds. Please go here: https://aka.ms/oai/quotaincrease if you would like to further increase the default rate limit.",
				cmpOr(apiVersion, "2024-02-15-preview"), kind, secs),
			noType: true,
		}
	}
	switch dec.Reason {
	case ReasonTokens:
		return apiError{Type: "tokens", Code: "rate_limit_exceeded", Message: fmt.Sprintf(
			"Rate limit reached for %s in organization %s on tokens per min (TPM): Limit %d, Used %d, Requested %d. Please try again in %s. %s",
			model, org, dec.Limits.TPM, dec.UsedTokens, requested, wait, rateLimitsLink)}
	case ReasonTooLarge:
		return apiError{Type: "tokens", Code: "rate_limit_exceeded", Message: fmt.Sprintf(
			"Request too large for %s in organization %s on tokens per min (TPM): Limit %d, Requested %d. The input or output tokens must be reduced in order to run successfully. %s",
			model, org, dec.Limits.TPM, requested, rateLimitsLink)}
	case ReasonConcurrency:
		return apiError{Type: "requests", Code: "rate_limit_exceeded", Message: fmt.Sprintf(
			"Rate limit reached for %s in organization %s on concurrent requests: Limit %d, Used %d, Requested 1. Please try again in %s. %s",
			model, org, dec.Limits.MaxConcurrency, dec.InFlight, wait, rateLimitsLink)}
	case ReasonBurst:
		return slowDownError(model, org, wait)
	default:
		return apiError{Type: "requests", Code: "rate_limit_exceeded", Message: fmt.Sprintf(
			"Rate limit reached for %s in organization %s on requests per min (RPM): Limit %d, Used %d, Requested 1. Please try again in %s. %s",
			model, org, dec.Limits.RPM, dec.UsedRequests, wait, rateLimitsLink)}
	}
}

func slowDownError(model, org, wait string) apiError {
	return apiError{Type: "rate_limit_error", Code: "slow_down", Message: fmt.Sprintf(
		"Your request rate for %s in organization %s increased too quickly. Please slow down: ramp up your traffic gradually and try again in %s. %s",
		model, org, wait, rateLimitsLink)}
}

func dashScopeBurstError(reqID string) apiError {
	return apiError{
		Message:    "Request rate increased too quickly. To ensure system stability, please adjust your client logic to scale requests more smoothly over time.",
		Type:       "limit_burst_rate",
		Code:       "limit_burst_rate",
		paramEmpty: true,
		requestID:  reqID,
	}
}

func insufficientQuotaError(mode Mode, reqID string) apiError {
	if mode == ModeDashScope {
		return apiError{Message: "You exceeded your current quota, check your plan and billing details.", Type: "insufficient_quota", Code: "insufficient_quota", paramEmpty: true, requestID: reqID}
	}
	return apiError{
		Message: "You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.",
		Type:    "insufficient_quota",
		Code:    "insufficient_quota",
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// apiKey extracts the API key: Authorization: Bearer, or api-key (Azure).
func apiKey(r *http.Request) string {
	if k := r.Header.Get("Api-Key"); k != "" {
		return k
	}
	auth := r.Header.Get("Authorization")
	if len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
		return strings.TrimSpace(auth[7:])
	}
	return ""
}

func maskKey(k string) string {
	if len(k) <= 8 {
		return k
	}
	return k[:6] + "***" + "..." + k[len(k)-4:]
}

// authed checks the API key when keys are configured.
func (s *Server) authed(h http.HandlerFunc) http.HandlerFunc {
	if len(s.cfg.APIKeys) == 0 {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		k := apiKey(r)
		if slices.Contains(s.cfg.APIKeys, k) {
			h(w, r)
			return
		}
		reqID := newRequestID()
		s.dialect.commonHeaders(w, reqID)
		msg := "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field (with blank username) if you're accessing the API from your browser and are prompted for a username. You can obtain an API key from https://platform.openai.com/account/api-keys."
		code := ""
		if k != "" {
			msg = fmt.Sprintf("Incorrect API key provided: %s. You can find your API key at https://platform.openai.com/account/api-keys.", maskKey(k))
			code = "invalid_api_key"
		}
		writeError(w, http.StatusUnauthorized, apiError{Message: msg, Type: "invalid_request_error", Code: code})
	}
}
