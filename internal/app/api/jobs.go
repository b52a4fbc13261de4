package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/store"
)

// MaxBatch is the most jobs of one POST /v1/jobs.
const MaxBatch = producer.MaxBatchDefault

// queueInfo is the queue part of a 202: the figures of the jobs' tenant.
type queueInfo struct {
	QueueDepth int64 `json:"queue_depth"`
	// QueueSoftShare and QueueHardShare are the tenant's depths from which
	// it is throttled and refused.
	QueueSoftShare int64 `json:"queue_soft_share"`
	QueueHardShare int64 `json:"queue_hard_share"`
	// EstimatedWaitSeconds is null when the wait cannot be estimated (no
	// job finished recently).
	EstimatedWaitSeconds *float64 `json:"estimated_wait_seconds"`
	Backpressure         string   `json:"backpressure"`
}

// The backpressure headers of POST /v1/jobs, each the figure of the jobs'
// tenant (docs/design/admission.md).
const (
	HeaderBackpressure  = "X-Llmq-Backpressure"
	HeaderQueueDepth    = "X-Llmq-Queue-Depth"
	HeaderQueueShare    = "X-Llmq-Queue-Share"
	HeaderEstimatedWait = "X-Llmq-Estimated-Wait"
)

// ownQueue is q's figures for the tenant of the jobs admitted or refused
// with it, set as the backpressure headers too.
func ownQueue(w http.ResponseWriter, q producer.QueueState) queueInfo {
	depth, drain, known, state := q.Own()
	qi := queueInfo{QueueDepth: depth, Backpressure: string(state)}
	if t := q.Tenant; t != nil {
		qi.QueueSoftShare, qi.QueueHardShare = t.SoftShare, t.HardShare
	}
	h := w.Header()
	h.Set(HeaderBackpressure, qi.Backpressure)
	h.Set(HeaderQueueDepth, strconv.FormatInt(depth, 10))
	if qi.QueueHardShare > 0 {
		h.Set(HeaderQueueShare, strconv.FormatInt(qi.QueueHardShare, 10))
	}
	if known {
		s := drain.Seconds()
		qi.EstimatedWaitSeconds = &s
		h.Set(HeaderEstimatedWait, strconv.FormatInt(int64(math.Ceil(s)), 10))
	}
	return qi
}

// refusal is the error of jobs the producer refused for backpressure, its
// field named as in a batch (jobs[i].field) when batch is set.
func refusal(bp *producer.ErrBackpressure, qi queueInfo, batch bool) Error {
	field := func(name string) string {
		if batch {
			return fmt.Sprintf("jobs[%d].%s", bp.Index, name)
		}
		return name
	}
	switch {
	case bp.Reason == producer.ReasonDeadline:
		return Error{Code: CodeDeadlineUnreachable, Field: field("deadline"),
			Message: fmt.Sprintf("the estimated %s passes the deadline of job %q", predictionText(bp, qi), bp.JobID)}
	case bp.Reason == producer.ReasonTenantQueueFull && bp.Project != "":
		return Error{Code: CodeTenantQueueFull, Field: field("project"),
			Message: fmt.Sprintf("project %q holds %d jobs, at its hard depth: retry later; other projects are admitted",
				bp.Project, bp.ProjectDepth)}
	case bp.Reason == producer.ReasonTenantQueueFull:
		return Error{Code: CodeTenantQueueFull,
			Message: fmt.Sprintf("tenant %q holds %d jobs, at its share of the queue (%d): retry later; other tenants are admitted",
				bp.Tenant, qi.QueueDepth, qi.QueueHardShare)}
	}
	return Error{Code: CodeQueueFull, Message: "the queue is full, at its hard limit for every tenant: retry later"}
}

type receiptJSON struct {
	ID        string `json:"id"`
	Tenant    string `json:"tenant"`
	Status    string `json:"status"`
	Created   bool   `json:"created"`
	Published bool   `json:"published"`
}

type acceptedJob struct {
	receiptJSON
	queueInfo
}

type acceptedBatch struct {
	Jobs []receiptJSON `json:"jobs"`
	queueInfo
}

func drainSeconds(d time.Duration, known bool) *float64 {
	if !known {
		return nil
	}
	s := d.Seconds()
	return &s
}

// postJobs enqueues one job or a batch ({"jobs": [...]}).
// jobReadStore is what the jobs endpoints read and cancel.
type jobReadStore interface {
	Get(ctx context.Context, tenant, id string) (*store.JobRecord, error)
	List(ctx context.Context, o store.ListOptions) ([]*store.JobRecord, string, error)
	Cancel(ctx context.Context, tenant, id string) (*store.JobRecord, error)
	Attempts(ctx context.Context, tenant, id string) ([]store.Attempt, error)
}

// jobsHandler serves /v1/jobs and /v1/queue: admits jobs through the
// producer, reads and cancels them in the store.
type jobsHandler struct {
	admission
	producer *producer.Producer
	store    jobReadStore
	// retryAfter is the Retry-After of a 503.
	retryAfter time.Duration
}

func (jh *jobsHandler) postJobs(w http.ResponseWriter, r *http.Request) {
	s, _ := scopeOf(r)
	if !jsonContent(w, r) {
		return
	}
	raw, batch, e := jh.readBody(http.MaxBytesReader(w, r.Body, jh.maxBodyBytes))
	if e != nil {
		status := http.StatusBadRequest
		if e.Code == llmq.CodeTooLarge && e.Field == "" && strings.HasPrefix(e.Message, "request body") {
			status = http.StatusRequestEntityTooLarge
		}
		writeError(w, status, *e)
		return
	}
	jobs := make([]*llmq.Job, len(raw))
	for i, b := range raw {
		prefix := ""
		if batch {
			prefix = fmt.Sprintf("jobs[%d]", i)
		}
		j, e := jh.decodeJob(b, s, prefix)
		if e != nil {
			writeError(w, http.StatusBadRequest, *e)
			return
		}
		jobs[i] = j
	}
	if e, err := jh.budgetRefusal(r.Context(), jobs, batch); err != nil {
		jh.publishError(w, r, err, batch)
		return
	} else if e != nil {
		writeError(w, http.StatusPaymentRequired, *e)
		return
	}
	rs, q, err := jh.producer.PublishBatch(r.Context(), jobs)
	if err != nil && !errors.Is(err, producer.ErrUnpublished) {
		jh.publishError(w, r, err, batch)
		return
	}
	qi := ownQueue(w, q)
	if !batch {
		rec := rs[0]
		w.Header().Set("Location", "/v1/jobs/"+rec.ID)
		writeJSON(w, http.StatusAccepted, acceptedJob{receiptJSON: toReceipt(rec), queueInfo: qi})
		return
	}
	out := acceptedBatch{Jobs: make([]receiptJSON, len(rs)), queueInfo: qi}
	for i, rec := range rs {
		out.Jobs[i] = toReceipt(rec)
	}
	writeJSON(w, http.StatusAccepted, out)
}

func toReceipt(r producer.Receipt) receiptJSON {
	return receiptJSON{ID: r.ID, Tenant: r.Tenant, Status: string(r.Status), Created: r.Created, Published: r.Published}
}

// decodeJob decodes and checks one job for the request's scope: a tenant
// key's jobs are its tenant's; an operator's are the tenant parameter's
// when given, else the job's own (llmq's default tenant when it names
// none). Field paths get prefix.
func (ad *admission) decodeJob(b json.RawMessage, s scope, prefix string) (*llmq.Job, *Error) {
	path := func(f string) string {
		switch {
		case prefix == "":
			return f
		case f == "":
			return prefix
		}
		return prefix + "." + f
	}
	// A tenant's job names no tenant, or its own: decoded for it, the job
	// is recorded as Decode returned it, validated once (Job.Validated).
	j, err := llmq.Decode(b, llmq.DecodeOptions{MaxMessageBytes: ad.maxMessageBytes, Tenant: s.tenant})
	var ve *llmq.ValidationError
	if errors.As(err, &ve) {
		details := slices.Clone(ve.Errors)
		for i := range details {
			details[i].Field = path(details[i].Field)
		}
		return nil, &Error{Code: details[0].Code, Field: details[0].Field, Message: details[0].Message, Details: details}
	}
	if err != nil {
		return nil, &Error{Code: llmq.CodeInvalidJSON, Field: path(""), Message: err.Error()}
	}
	// An operator's job is its own tenant's; a tenant's job that names
	// another tenant (or "", the default tenant) is refused.
	if tenant := s.tenant; tenant != "" && j.Tenant != tenant {
		return nil, &Error{Code: CodeTenantMismatch, Field: path("tenant"),
			Message: fmt.Sprintf("the API key acts for tenant %q; omit tenant or send %q", tenant, tenant)}
	}
	if errs := append(ad.catalog().CheckModels(j), ad.tenants().CheckProject(j)...); len(errs) > 0 {
		for i := range errs {
			errs[i].Field = path(errs[i].Field)
		}
		return nil, &Error{Code: errs[0].Code, Field: errs[0].Field, Message: errs[0].Message, Details: errs}
	}
	if j.Deadline != nil && !j.Deadline.After(ad.clock.Now()) {
		return nil, &Error{Code: llmq.CodeInvalidValue, Field: path("deadline"),
			Message: fmt.Sprintf("deadline %s has already passed", j.Deadline.Format(time.RFC3339))}
	}
	return j, nil
}

// publishError answers a refused PublishBatch.
func (jh *jobsHandler) publishError(w http.ResponseWriter, r *http.Request, err error, batch bool) {
	var bp *producer.ErrBackpressure
	switch {
	case errors.As(err, &bp):
		setRetryAfter(w, bp.RetryAfter)
		qi := ownQueue(w, bp.Queue)
		if bp.Reason == producer.ReasonDeadline {
			jh.logDeadline(r, bp, qi)
		}
		writeError(w, http.StatusTooManyRequests, refusal(bp, qi, batch))
	case errors.Is(err, producer.ErrBrokerUnavailable):
		setRetryAfter(w, jh.retryAfter)
		writeError(w, http.StatusServiceUnavailable, Error{Code: CodeBrokerUnavailable,
			Message: "the message broker cannot be reached: nothing was recorded, retry later"})
	case errors.Is(err, producer.ErrDatabaseUnavailable):
		jh.log.Warn("api: database unavailable", slog.String("error", err.Error()))
		setRetryAfter(w, jh.retryAfter)
		writeError(w, http.StatusServiceUnavailable, Error{Code: CodeDatabaseUnavailable,
			Message: "the database cannot be reached: nothing was recorded, retry later"})
	case errors.Is(err, store.ErrInvalidJob):
		writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Message: "the database refused the job: " + err.Error()})
	default:
		jh.internalError(w, r, err)
	}
}

func notFound(w http.ResponseWriter, id string) {
	writeError(w, http.StatusNotFound, Error{Code: CodeNotFound, Field: "id", Message: fmt.Sprintf("no job %.128q", id)})
}

// jobID returns the {id} of the path; a path that cannot be a job id
// (invalid UTF-8, NUL, other characters than a job id has) answers 404
// without asking the database, like a missing job.
func jobID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if !llmq.ValidID(id) {
		notFound(w, id)
		return "", false
	}
	return id, true
}

func (jh *jobsHandler) getJob(w http.ResponseWriter, r *http.Request) {
	id, ok := jobID(w, r)
	if !ok {
		return
	}
	tenant, ok := jobTenant(w, r)
	if !ok {
		return
	}
	rec, err := jh.store.Get(r.Context(), tenant, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		notFound(w, id)
	case err != nil:
		jh.internalError(w, r, err)
	default:
		calls, err := jh.store.Attempts(r.Context(), tenant, id)
		if err != nil {
			jh.internalError(w, r, err)
			return
		}
		v := JobView(rec)
		v.Body, v.Calls = rec.Body, CallViews(calls)
		writeJSON(w, http.StatusOK, v)
	}
}

func (jh *jobsHandler) cancelJob(w http.ResponseWriter, r *http.Request) {
	id, ok := jobID(w, r)
	if !ok {
		return
	}
	tenant, ok := jobTenant(w, r)
	if !ok {
		return
	}
	rec, err := jh.store.Cancel(r.Context(), tenant, id)
	var ite *store.IllegalTransitionError
	switch {
	case errors.Is(err, store.ErrNotFound):
		notFound(w, id)
	case errors.As(err, &ite):
		writeError(w, http.StatusConflict, Error{Code: CodeNotCancellable,
			Message: fmt.Sprintf("job %q is %s: only a job that has not started can be cancelled", id, ite.From)})
	case err != nil:
		jh.internalError(w, r, err)
	default:
		writeJSON(w, http.StatusOK, JobView(rec))
	}
}

// maxCursorBytes bounds an after= cursor: an encoded time and job id.
const maxCursorBytes = 256

// isDataException reports whether the database refused a value of the
// request itself (SQLSTATE class 22: invalid UTF-8, NUL, out of range): bad
// input, answered 400, not a server error.
func isDataException(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "22")
}

func (jh *jobsHandler) listJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s, _ := scopeOf(r)
	opts := store.ListOptions{Tenant: s.tenant, AllTenants: s.operator && s.tenant == "", After: q.Get("after")}
	if len(opts.After) > maxCursorBytes {
		writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: "after",
			Message: "not a cursor returned by this API"})
		return
	}
	if s := q.Get("status"); s != "" {
		if !slices.Contains(llmq.Statuses, llmq.Status(s)) {
			writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: "status",
				Message: fmt.Sprintf("unknown status %.64q", s)})
			return
		}
		opts.Status = llmq.Status(s)
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > store.ListLimitMax {
			writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: "limit",
				Message: fmt.Sprintf("must be an integer from 1 to %d", store.ListLimitMax)})
			return
		}
		opts.Limit = n
	}
	recs, next, err := jh.store.List(r.Context(), opts)
	switch {
	case errors.Is(err, store.ErrBadCursor), isDataException(err):
		// A cursor the store did not print, or one forged with bytes the
		// database cannot compare (invalid UTF-8, NUL).
		writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: "after",
			Message: "not a cursor returned by this API"})
		return
	case err != nil:
		jh.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, JobList(recs, next))
}

// queue answers GET /v1/queue: a tenant's own part of the queue, or for
// an operator the whole queue and every tenant holding jobs (one tenant
// with the tenant parameter).
func (jh *jobsHandler) queue(w http.ResponseWriter, r *http.Request) {
	s, _ := scopeOf(r)
	var (
		q       producer.QueueState
		tenants []producer.TenantQueue
		err     error
	)
	if s.tenant != "" {
		q, err = jh.producer.QueueOf(r.Context(), s.tenant)
	} else {
		q, tenants, err = jh.producer.Tenants(r.Context())
	}
	switch {
	case errors.Is(err, producer.ErrBrokerUnavailable):
		setRetryAfter(w, jh.retryAfter)
		writeError(w, http.StatusServiceUnavailable, Error{Code: CodeBrokerUnavailable,
			Message: "the message broker cannot be reached"})
	case errors.Is(err, producer.ErrDatabaseUnavailable):
		setRetryAfter(w, jh.retryAfter)
		writeError(w, http.StatusServiceUnavailable, Error{Code: CodeDatabaseUnavailable,
			Message: "the database cannot be reached"})
	case err != nil:
		jh.internalError(w, r, err)
	default:
		writeJSON(w, http.StatusOK, QueueView(q, tenants))
	}
}
