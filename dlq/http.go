package dlq

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// NewHTTPHandler serves the dead letters of the caller's tenant: GET
// /v1/dead-letters (newest first, paged), GET /v1/dead-letters/{id} (the
// whole [View]) and POST /v1/dead-letters/{id}/replay; the parameters and
// answers are in internal/app/api/openapi.yaml. scopeOf returns the tenant
// the (authenticated) request acts on and true, "" meaning every tenant
// (an operator); false is answered 401. A letter of another tenant is 404,
// like a missing one. Every answer is no-store and nosniff.
func NewHTTPHandler(svc *Service, scopeOf func(*http.Request) (tenant string, ok bool)) http.Handler {
	h := &httpHandler{svc: svc, scopeOf: scopeOf}
	mux := http.NewServeMux()
	for _, r := range HTTPRoutes {
		mux.HandleFunc(r, map[string]http.HandlerFunc{
			"GET /v1/dead-letters": h.list, "GET /v1/dead-letters/{id}": h.get,
			"POST /v1/dead-letters/{id}/replay": h.replay,
		}[r])
	}
	return mux
}

// HTTPRoutes are the patterns NewHTTPHandler serves, for a server that
// mounts it (and labels its metrics by pattern).
var HTTPRoutes = []string{"GET /v1/dead-letters", "GET /v1/dead-letters/{id}", "POST /v1/dead-letters/{id}/replay"}

type httpHandler struct {
	svc     *Service
	scopeOf func(*http.Request) (string, bool)
}

type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field"`
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
		h.fail(w, http.StatusBadRequest, "invalid_value", "cursor was not returned by this API", "cursor")
	case isDataException(err):
		// A filter the database cannot even compare (a forged cursor's
		// bytes): bad input, not a server error.
		h.fail(w, http.StatusBadRequest, "invalid_value", "a parameter holds bytes the database cannot read", "")
	case errors.Is(err, ErrNoPublisher):
		h.fail(w, http.StatusServiceUnavailable, "unavailable", "replay is not configured on this server", "")
	default:
		h.svc.log.Error("dead-letter API", slog.Any("error", err))
		h.fail(w, http.StatusInternalServerError, "internal", "internal error", "")
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (h *httpHandler) tenant(w http.ResponseWriter, r *http.Request) (string, bool) {
	t, ok := h.scopeOf(r)
	if !ok {
		h.fail(w, http.StatusUnauthorized, "unauthorized", "no tenant for this request", "")
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
	if v := query.Reason; v != "" && !slices.Contains(Reasons, Reason(v)) {
		h.fail(w, http.StatusBadRequest, "invalid_value", "reason must be one of "+reasonNames(), "reason")
		return
	}
	if v := query.JobID; v != "" && !llmq.ValidID(v) {
		h.fail(w, http.StatusBadRequest, "invalid_value",
			fmt.Sprintf("job_id must be 1-%d characters of [A-Za-z0-9._:-]", llmq.MaxIDLength), "job_id")
		return
	}
	if v := query.After; v != "" && !validCursor(v) {
		h.fail(w, http.StatusBadRequest, "invalid_value", "cursor was not returned by this API", "cursor")
		return
	}
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"since", &query.Since}, {"until", &query.Until}} {
		if v := q.Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				h.fail(w, http.StatusBadRequest, "invalid_value", p.name+" must be an RFC 3339 time", p.name)
				return
			}
			*p.dst = t
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.ListLimitMax {
			h.fail(w, http.StatusBadRequest, "invalid_value", "limit must be an integer from 1 to "+strconv.Itoa(store.ListLimitMax), "limit")
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
		Data       []View  `json:"data"`
		NextCursor *string `json:"next_cursor"`
	}{Views(recs), cursor})
}

func (h *httpHandler) get(w http.ResponseWriter, r *http.Request) {
	tenant, ok := h.tenant(w, r)
	if !ok {
		return
	}
	id, ok := letterID(w, r, h)
	if !ok {
		return
	}
	d, err := h.svc.Get(r.Context(), tenant, id)
	if err != nil {
		h.failErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, NewView(d, true))
}

// letterID reads the {id} of the path; a path that is no letter id answers
// 404, like a missing letter.
func letterID(w http.ResponseWriter, r *http.Request, h *httpHandler) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		h.fail(w, http.StatusNotFound, "not_found", "dead letter not found", "id")
		return 0, false
	}
	return id, true
}

func reasonNames() string {
	names := make([]string, len(Reasons))
	for i, r := range Reasons {
		names[i] = string(r)
	}
	return strings.Join(names, ", ")
}

// validCursor reports whether c can be a cursor this API printed: URL-safe
// base64 (the store's own check then refuses what it did not produce).
func validCursor(c string) bool {
	_, err := base64.RawURLEncoding.DecodeString(c)
	return err == nil && len(c) <= 256
}

// isDataException reports whether the database refused a value of the
// query itself (SQLSTATE class 22: invalid UTF-8, NUL, a value out of
// range).
func isDataException(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "22")
}

func (h *httpHandler) replay(w http.ResponseWriter, r *http.Request) {
	tenant, ok := h.tenant(w, r)
	if !ok {
		return
	}
	id, ok := letterID(w, r, h)
	if !ok {
		return
	}
	res, err := h.svc.Replay(r.Context(), tenant, id)
	if err != nil {
		h.failErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Data     View `json:"data"`
		Replayed bool `json:"replayed"`
	}{NewView(res.Record, false), res.Replayed})
}
