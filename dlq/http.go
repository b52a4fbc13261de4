package dlq

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/llmq/llmq/store"
)

// NewHTTPHandler serves the dead letters of the caller's tenant:
//
//	GET  /v1/dead-letters              ?reason= &job_id= &since= &until= (RFC 3339) &limit= &cursor=
//	     -> 200 {"data": [letter...], "next_cursor": "..." | null}, newest first
//	POST /v1/dead-letters/{id}/replay  -> 200 {"data": letter, "replayed": true | false}
//
// tenantOf returns the tenant the (already authenticated) request acts for;
// "" is answered 401. A letter of another tenant is 404, like a missing one.
// Errors are {"error": {"code", "message", "field"}}.
func NewHTTPHandler(svc *Service, tenantOf func(*http.Request) string) http.Handler {
	h := &httpHandler{svc: svc, tenantOf: tenantOf}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/dead-letters", h.list)
	mux.HandleFunc("POST /v1/dead-letters/{id}/replay", h.replay)
	return mux
}

type httpHandler struct {
	svc      *Service
	tenantOf func(*http.Request) string
}

type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

func (h *httpHandler) fail(w http.ResponseWriter, status int, code, msg, field string) {
	writeJSON(w, status, map[string]apiError{"error": {Code: code, Message: msg, Field: field}})
}

func (h *httpHandler) failErr(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, ErrNotFound):
		h.fail(w, http.StatusNotFound, "not_found", "dead letter not found", "id")
	case errors.Is(err, ErrNotReplayable):
		h.fail(w, http.StatusConflict, "not_replayable", err.Error(), "id")
	case errors.Is(err, ErrBadCursor):
		h.fail(w, http.StatusBadRequest, "invalid_argument", "cursor was not returned by this API", "cursor")
	case errors.Is(err, ErrNoPublisher):
		h.fail(w, http.StatusServiceUnavailable, "unavailable", "replay is not configured on this server", "")
	default:
		h.svc.log.Error("dead-letter API", slog.Any("error", err))
		h.fail(w, http.StatusInternalServerError, "internal", "internal error", "")
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (h *httpHandler) tenant(w http.ResponseWriter, r *http.Request) (string, bool) {
	t := h.tenantOf(r)
	if t == "" {
		h.fail(w, http.StatusUnauthorized, "unauthenticated", "no tenant for this request", "")
		return "", false
	}
	return t, true
}

func (h *httpHandler) list(w http.ResponseWriter, r *http.Request) {
	tenant, ok := h.tenant(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	query := store.DeadLetterListOptions{
		DeadLetterFilter: store.DeadLetterFilter{Tenant: tenant, Reason: q.Get("reason"), JobID: q.Get("job_id")},
		After:            q.Get("cursor"),
	}
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"since", &query.Since}, {"until", &query.Until}} {
		if v := q.Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				h.fail(w, http.StatusBadRequest, "invalid_argument", p.name+" must be an RFC 3339 time", p.name)
				return
			}
			*p.dst = t
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.ListLimitMax {
			h.fail(w, http.StatusBadRequest, "invalid_argument", "limit must be an integer from 1 to "+strconv.Itoa(store.ListLimitMax), "limit")
			return
		}
		query.Limit = n
	}
	recs, next, err := h.svc.List(r.Context(), query)
	if err != nil {
		h.failErr(w, err)
		return
	}
	var cursor *string
	if next != "" {
		cursor = &next
	}
	writeJSON(w, http.StatusOK, struct {
		Data       []*store.DeadLetter `json:"data"`
		NextCursor *string             `json:"next_cursor"`
	}{recs, cursor})
}

func (h *httpHandler) replay(w http.ResponseWriter, r *http.Request) {
	tenant, ok := h.tenant(w, r)
	if !ok {
		return
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		h.fail(w, http.StatusNotFound, "not_found", "dead letter not found", "id")
		return
	}
	res, err := h.svc.Replay(r.Context(), tenant, id)
	if err != nil {
		h.failErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Data     *store.DeadLetter `json:"data"`
		Replayed bool              `json:"replayed"`
	}{res.Record, res.Replayed})
}
