package api

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/jsonlimit"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/worker"
)

// Gateway mode: POST /v1/chat/completions and GET /v1/models in OpenAI's
// shapes, so that an OpenAI SDK pointed at llmq works unchanged. A call
// becomes a job published like POST /v1/jobs (same admission, outbox and
// broker); the handler waits for the job to end, woken through Postgres
// LISTEN/NOTIFY (gateway_wait.go), and answers with the stored provider
// JSON. See docs/design/gateway.md.

// Request headers of a gateway call.
const (
	// HeaderPriority is the job's priority: high, normal or low.
	HeaderPriority = "X-Llmq-Priority"
	// HeaderDeadline is the call's deadline: an RFC 3339 time, or seconds
	// from now.
	HeaderDeadline = "X-Llmq-Deadline"
	// HeaderClientTimeout is the timeout, in seconds, that the OpenAI SDKs
	// announce; the deadline when HeaderDeadline is absent.
	HeaderClientTimeout = "X-Stainless-Timeout"
	// HeaderJobID carries the job's id on every answer once the job
	// exists (GET /v1/jobs/{id} with the same key reads it).
	HeaderJobID = "X-Llmq-Job-Id"
	// HeaderProject is the call's project, one of its tenant's: the job's
	// project field (its limits, budgets and pause apply).
	HeaderProject = "X-Llmq-Project"
)

// CodeDeadlineUnmeetable is the code of the 429 a gateway call gets when
// its predicted completion passes its deadline (nothing was enqueued).
const CodeDeadlineUnmeetable = "deadline_unmeetable"

// CodeLoop is the code of the 400 a request from an llmq worker
// (worker.HeaderHop) gets: the worker's upstream is this API.
const CodeLoop = "llmq_loop"

// refuseHops answers a request from an llmq worker with 400 CodeLoop,
// before authentication: each call of a worker whose OPENAI_BASE_URL names
// an llmq API would become another job, for ever.
func refuseHops(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(worker.HeaderHop) != "" {
			writeOpenAIError(w, http.StatusBadRequest, Error{Code: CodeLoop, Message: "this request comes from an llmq worker " +
				"whose upstream (OPENAI_BASE_URL) is an llmq API: each call would become another job; point the worker at the provider"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// openAIError is OpenAI's error object.
type openAIError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// writeOpenAIError answers e in OpenAI's shape: Field becomes param (with
// the job's "body." prefix dropped: the caller sent the body), the type
// follows the status; a 429 without Retry-After gets
// producer.RetryAfterDefault.
func writeOpenAIError(w http.ResponseWriter, status int, e Error) {
	if status == http.StatusTooManyRequests && w.Header().Get("Retry-After") == "" {
		// Every 429 says when to retry (one passed on from a failed job
		// has no figure of its own).
		setRetryAfter(w, producer.RetryAfterDefault)
	}
	oe := openAIError{Message: e.Message, Type: openAIErrorType(status)}
	if f := strings.TrimPrefix(e.Field, "body."); f != "" && f != "body" {
		oe.Param = &f
	}
	if e.Code != "" {
		oe.Code = &e.Code
	}
	writeJSON(w, status, struct {
		Error openAIError `json:"error"`
	}{oe})
}

// openAIErrorType is the type OpenAI gives an error of status.
func openAIErrorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

// model is an entry of GET /v1/models.
type model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// models lists the catalog's models in OpenAI's list shape.
func (a *gateway) models(w http.ResponseWriter, _ *http.Request) {
	data := []model{}
	for _, name := range slices.Sorted(maps.Keys(a.catalog().Models)) {
		data = append(data, model{ID: name, Object: "model", OwnedBy: "llmq"})
	}
	writeJSON(w, http.StatusOK, struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{"list", data})
}

// chatCompletions serves one gateway call: validate, publish, wait, answer.
func (a *gateway) chatCompletions(w http.ResponseWriter, r *http.Request) {
	s, _ := scopeOf(r)
	if s.tenant == "" {
		writeOpenAIError(w, http.StatusBadRequest, Error{Code: llmq.CodeRequired, Field: "tenant",
			Message: "an operator key names the call's tenant: add ?tenant=<tenant>"})
		return
	}
	raw, e := a.readCall(w, r)
	if e != nil {
		status := http.StatusBadRequest
		if e.Field == "" && e.Code == llmq.CodeTooLarge && strings.HasPrefix(e.Message, "request body") {
			status = http.StatusRequestEntityTooLarge
		}
		writeOpenAIError(w, status, *e)
		return
	}
	call, e := a.gatewayCall(r, raw)
	if e != nil {
		writeOpenAIError(w, http.StatusBadRequest, *e)
		return
	}
	j, e := a.decodeJob(call.job, s, "")
	if e != nil {
		writeOpenAIError(w, http.StatusBadRequest, projectHeader(*e))
		return
	}
	if e := a.pausedRefusal(j.Tenant, j.Project); e != nil {
		a.limited.WithLabelValues("paused").Inc()
		setRetryAfter(w, a.cfg.RetryAfterUnavailable)
		writeOpenAIError(w, http.StatusTooManyRequests, projectHeader(*e))
		return
	}
	if e, err := a.budgetRefusal(r.Context(), []*llmq.Job{j}, false); err != nil {
		a.gatewayPublishError(w, r, err)
		return
	} else if e != nil {
		writeOpenAIError(w, http.StatusPaymentRequired, *e)
		return
	}
	leave, ok := a.waitingCalls.enter(s.tenant, a.cfg.Gateway.MaxWaiting)
	if !ok {
		a.limited.WithLabelValues("gateway_waiting").Inc()
		setRetryAfter(w, a.cfg.RetryAfterUnavailable)
		writeOpenAIError(w, http.StatusTooManyRequests, Error{Code: CodeTooManyWaiting, Message: fmt.Sprintf(
			"tenant %q has %d gateway calls waiting, the most it may (gateway.max_waiting): nothing was enqueued, retry when one ends",
			s.tenant, a.cfg.Gateway.MaxWaiting)})
		return
	}
	defer leave()
	rec, _, err := a.cfg.Producer.Publish(r.Context(), j)
	if err != nil && !errors.Is(err, producer.ErrUnpublished) {
		a.gatewayPublishError(w, r, err)
		return
	}
	// The outbox publishes an unpublished job later: wait for it as well.
	w.Header().Set(HeaderJobID, rec.ID)
	k := store.Key{Tenant: rec.Tenant, ID: rec.ID}
	// The server's read and write timeouts bound a request, not a wait:
	// the wait ends with the job or with the caller.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	if call.stream && a.cfg.Streams != nil {
		a.streamCall(w, r, k, call)
		return
	}
	done, err := a.waitDone(r.Context(), k)
	if err != nil {
		a.callerLeft(r.Context(), k)
		return
	}
	a.answer(w, done, call)
}

// readCall reads a call's body: one job's body, so no larger than a job
// may be (MaxMessageBytes and the slack of readBody) nor than
// MaxBodyBytes, with keys, strings and nesting bounded as it streams.
func (a *gateway) readCall(w http.ResponseWriter, r *http.Request) ([]byte, *Error) {
	limit := a.cfg.MaxBodyBytes
	if a.cfg.MaxMessageBytes > 0 {
		limit = min(limit, int64(a.cfg.MaxMessageBytes)+valueSlack)
	}
	raw, err := io.ReadAll(jsonlimit.NewReader(http.MaxBytesReader(w, r.Body, limit), a.jsonLimits()))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return nil, &Error{Code: llmq.CodeTooLarge,
			Message: fmt.Sprintf("request body is over the %d byte limit of a gateway call", limit)}
	case err != nil:
		if e := shapeError(err, ""); e != nil {
			return nil, e
		}
		return nil, &Error{Code: llmq.CodeInvalidJSON, Message: "request body: " + err.Error()}
	}
	return raw, nil
}

// gatewayCall is a chat-completions request made into a job.
type gatewayCall struct {
	job          json.RawMessage
	stream       bool
	includeUsage bool
}

// gatewayCall reads the request: the body is the job's body less stream
// and stream_options (a streamed call is marked in the job's metadata, and
// the worker asks for the stream), priority and deadline come from the
// headers or the defaults.
func (a *gateway) gatewayCall(r *http.Request, raw []byte) (gatewayCall, *Error) {
	var call gatewayCall
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return call, &Error{Code: llmq.CodeInvalidJSON, Message: "request body is not a JSON object"}
	}
	if s, ok := fields["stream"]; ok {
		if err := json.Unmarshal(s, &call.stream); err != nil {
			return call, &Error{Code: llmq.CodeInvalidType, Field: "stream", Message: "must be a boolean"}
		}
		var opts struct {
			IncludeUsage bool `json:"include_usage"`
		}
		if o, ok := fields["stream_options"]; ok {
			if err := json.Unmarshal(o, &opts); err != nil {
				return call, &Error{Code: llmq.CodeInvalidType, Field: "stream_options", Message: "must be an object"}
			}
		}
		call.includeUsage = opts.IncludeUsage
		delete(fields, "stream")
		delete(fields, "stream_options")
		raw, _ = json.Marshal(fields) // re-encoding decoded JSON cannot fail
	}
	prio := a.cfg.Gateway.Priority
	if h := r.Header.Get(HeaderPriority); h != "" {
		prio = llmq.Priority(strings.ToLower(strings.TrimSpace(h)))
		if !prio.Valid() {
			return call, &Error{Code: llmq.CodeInvalidValue, Field: HeaderPriority, Message: "must be high, normal or low"}
		}
	}
	deadline, e := a.callDeadline(r.Header)
	if e != nil {
		return call, e
	}
	var meta map[string]string
	if call.stream && a.cfg.Streams != nil {
		// The worker streams the call (gateway_stream.go).
		meta = map[string]string{worker.MetadataStream: "true"}
	}
	call.job, _ = json.Marshal(struct {
		Priority llmq.Priority     `json:"priority"`
		Deadline time.Time         `json:"deadline"`
		Project  string            `json:"project,omitempty"`
		Metadata map[string]string `json:"metadata,omitempty"`
		Body     json.RawMessage   `json:"body"`
	}{prio, deadline, strings.TrimSpace(r.Header.Get(HeaderProject)), meta, raw})
	return call, nil
}

// projectHeader names HeaderProject in e where it names the job's
// project: a call's project is that header.
func projectHeader(e Error) Error {
	if e.Field == "project" {
		e.Field = HeaderProject
	}
	e.Details = slices.Clone(e.Details)
	for i := range e.Details {
		if e.Details[i].Field == "project" {
			e.Details[i].Field = HeaderProject
		}
	}
	return e
}

// callDeadline is X-LLMQ-Deadline (RFC 3339, or seconds from now), else
// now plus X-Stainless-Timeout seconds, else now plus the default. No
// deadline passes Gateway.MaxDeadline from now: X-LLMQ-Deadline past it is
// refused, X-Stainless-Timeout (an SDK's own timeout, sent unasked) is cut
// to it.
func (a *gateway) callDeadline(h http.Header) (time.Time, *Error) {
	now := a.cfg.Clock.Now().UTC()
	limit := now.Add(a.cfg.Gateway.MaxDeadline)
	seconds := func(v, name string) (time.Time, *Error) {
		s, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || s <= 0 || math.IsInf(s, 0) || s > (100*365*24*time.Hour).Seconds() {
			return time.Time{}, &Error{Code: llmq.CodeInvalidValue, Field: name,
				Message: "must be an RFC 3339 time or a positive number of seconds"}
		}
		return now.Add(time.Duration(s * float64(time.Second))), nil
	}
	if v := h.Get(HeaderDeadline); v != "" {
		t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(v))
		var e *Error
		if err != nil {
			t, e = seconds(v, HeaderDeadline)
		}
		if e == nil && t.After(limit) {
			e = &Error{Code: llmq.CodeInvalidValue, Field: HeaderDeadline, Message: fmt.Sprintf(
				"is %.0f s from now, past the %.0f s a call may wait (gateway.max_deadline)",
				t.Sub(now).Seconds(), a.cfg.Gateway.MaxDeadline.Seconds())}
		}
		return t.UTC(), e
	}
	if v := h.Get(HeaderClientTimeout); v != "" {
		t, e := seconds(v, HeaderClientTimeout)
		if t.After(limit) {
			t = limit
		}
		return t, e
	}
	return now.Add(a.cfg.Gateway.Timeout), nil
}

// gatewayPublishError answers a call the producer refused, nothing
// enqueued.
func (a *gateway) gatewayPublishError(w http.ResponseWriter, r *http.Request, err error) {
	var bp *producer.ErrBackpressure
	switch {
	case errors.As(err, &bp):
		setRetryAfter(w, bp.RetryAfter)
		qi := ownQueue(w, bp.Queue)
		e := refusal(bp, qi, false)
		if bp.Reason == producer.ReasonDeadline {
			e = Error{Code: CodeDeadlineUnmeetable,
				Message: fmt.Sprintf("the predicted %s passes the call's deadline: nothing was enqueued, retry later", predictionText(bp, qi))}
			a.logDeadline(r, bp, qi)
		}
		writeOpenAIError(w, http.StatusTooManyRequests, e)
	case errors.Is(err, producer.ErrBrokerUnavailable), errors.Is(err, producer.ErrDatabaseUnavailable):
		a.log.Warn("api: gateway call refused", slog.String("error", err.Error()))
		setRetryAfter(w, a.cfg.RetryAfterUnavailable)
		writeOpenAIError(w, http.StatusServiceUnavailable, Error{Code: CodeUnavailable,
			Message: "llmq cannot take the call now: nothing was recorded, retry later"})
	case errors.Is(err, store.ErrInvalidJob):
		writeOpenAIError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Message: "the database refused the request: " + err.Error()})
	default:
		a.log.Error("api: gateway call failed", slog.String("error", err.Error()))
		writeOpenAIError(w, http.StatusInternalServerError, Error{Code: CodeInternal, Message: "internal error"})
	}
}

// callerLeft handles a caller that went away while its job runs: the job
// completes (readable through GET /v1/jobs/{id}) unless CancelOnDisconnect
// asks to cancel it, which succeeds only before it started.
func (a *gateway) callerLeft(ctx context.Context, k store.Key) {
	if !a.cfg.Gateway.CancelOnDisconnect {
		return
	}
	_, err := a.cfg.Store.Cancel(context.WithoutCancel(ctx), k.Tenant, k.ID)
	var ite *store.IllegalTransitionError
	if err != nil && !errors.As(err, &ite) {
		a.log.Warn("api: cancel the job of a caller that left", slog.String("key", k.String()), slog.String("error", err.Error()))
	}
}

// answer writes the ended job as the provider would have: its stored JSON
// on success, the provider's status and error otherwise; retries and
// fallbacks are the worker's and never show.
func (a *gateway) answer(w http.ResponseWriter, rec *store.JobRecord, call gatewayCall) {
	switch rec.Status {
	case llmq.StatusSucceeded:
		if call.stream {
			a.stream(w, rec.Result, call.includeUsage)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(rec.Result)
	case llmq.StatusFailed:
		writeOpenAIError(w, failedStatus(rec), Error{Code: rec.ErrorCode, Message: rec.ErrorMessage})
	case llmq.StatusDeadLettered:
		writeOpenAIError(w, http.StatusBadGateway, Error{Code: cmp.Or(rec.ErrorCode, CodeUpstream),
			Message: "the upstream kept failing; llmq gave up on the call: " + rec.ErrorMessage})
	case llmq.StatusExpired:
		writeOpenAIError(w, http.StatusGatewayTimeout, Error{Code: "deadline_exceeded",
			Message: "the call's deadline passed before the upstream could take it"})
	default: // cancelled
		writeOpenAIError(w, http.StatusConflict, Error{Code: store.ErrorCodeCancelled,
			Message: "the call's job was cancelled through the API before it started"})
	}
}

// failedStatus is the HTTP status of a failed job's answer: the one the
// provider answered with, as the worker recorded it. A failure of llmq's
// own (no upstream status), or one recorded by a worker older than
// migration 0008 during a rolling upgrade, is told from the stored code:
// http_NNN for an answer that was not OpenAI JSON, else OpenAI's codes and
// types, else 400.
func failedStatus(rec *store.JobRecord) int {
	if rec.ErrorStatus >= 400 && rec.ErrorStatus <= 599 {
		return rec.ErrorStatus
	}
	code := rec.ErrorCode
	if n, ok := strings.CutPrefix(code, "http_"); ok {
		if s, err := strconv.Atoi(n); err == nil && s >= 400 && s <= 599 {
			return s
		}
	}
	switch code {
	case "invalid_api_key", "authentication_error":
		return http.StatusUnauthorized
	case "permission_error", "unsupported_country_region_territory":
		return http.StatusForbidden
	case "model_not_found", "not_found_error":
		return http.StatusNotFound
	case "insufficient_quota", "billing_hard_limit_reached":
		return http.StatusTooManyRequests
	case "result_unstorable":
		return http.StatusBadGateway
	}
	return http.StatusBadRequest
}
