package api

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/llmq/llmq"
)

// Error codes of the API's error bodies (besides llmq's field codes
// invalid_json, too_large, required, invalid_type and invalid_value).
const (
	CodeUnauthorized        = "unauthorized"
	CodeForbidden           = "forbidden"
	CodeNotFound            = "not_found"
	CodeMethodNotAllowed    = "method_not_allowed"
	CodeUnsupportedMedia    = "unsupported_media_type"
	CodeTenantMismatch      = "tenant_mismatch"
	CodeTooManyJobs         = "too_many_jobs"
	CodeNotCancellable      = "not_cancellable"
	CodeEmptyFilter         = "empty_filter"
	CodeNotReplayable       = "not_replayable"
	CodeUpstream            = "upstream_error"
	CodeUnavailable         = "unavailable"
	CodeQueueFull           = "queue_full"
	CodeTenantQueueFull     = "tenant_queue_full"
	CodeDeadlineUnreachable = "deadline_unreachable"
	CodeBrokerUnavailable   = "broker_unavailable"
	CodeDatabaseUnavailable = "database_unavailable"
	CodeInternal            = "internal"
)

// Error is the error object of every error response.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field is the JSON path (or query parameter) at fault; "" when the
	// request as a whole is.
	Field string `json:"field"`
	// Details lists every failing field of a validation error.
	Details []llmq.FieldError `json:"details,omitempty"`
}

type errorBody struct {
	Error Error `json:"error"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"encode response","field":""}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, status int, e Error) {
	writeJSON(w, status, errorBody{Error: e})
}

// setRetryAfter sets Retry-After to d in whole seconds, at least 1.
func setRetryAfter(w http.ResponseWriter, d time.Duration) {
	secs := int64(math.Ceil(d.Seconds()))
	w.Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
}
