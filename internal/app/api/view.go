package api

import (
	"encoding/json"
	"time"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/redact"
	"github.com/llmq/llmq/internal/tracing"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/store"
)

// The JSON views of llmq's own resources: what the API answers and what
// `llmq status --json` and `llmq jobs ls --json` print, byte for byte. The
// OpenAPI document (openapi.yaml) declares each as a schema, and tests
// validate both the API's answers and the commands' output against it.

// Job is a job as llmq shows it (schema Job).
type Job struct {
	ID             string            `json:"id"`
	Tenant         string            `json:"tenant"`
	Project        string            `json:"project,omitempty"`
	Status         string            `json:"status"`
	Priority       string            `json:"priority"`
	Model          string            `json:"model"`
	UsedModel      string            `json:"used_model,omitempty"`
	Deferrable     bool              `json:"deferrable"`
	Deadline       *time.Time        `json:"deadline,omitempty"`
	FallbackModels []string          `json:"fallback_models"`
	Metadata       map[string]string `json:"metadata"`
	// Attempts is the number of upstream calls started for the job.
	Attempts int `json:"attempts"`
	// Phase says what a running job does: waiting_for_quota, calling or
	// backing_off.
	Phase string `json:"phase,omitempty"`
	// WaitingReason says why a queued job waits (provider_quota,
	// tenant_quota, budget, batch, paused).
	WaitingReason string     `json:"waiting_reason,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	StartedAt     *time.Time `json:"started_at,omitempty"`
	FinishedAt    *time.Time `json:"finished_at,omitempty"`
	UpdatedAt     time.Time  `json:"updated_at"`
	// Result is the upstream's chat completion, once succeeded.
	Result json.RawMessage `json:"result,omitempty"`
	Error  *JobError       `json:"error,omitempty"`
	Usage  *Usage          `json:"usage,omitempty"`
	// CostUSD is the job's cost at the model's prices.
	CostUSD float64 `json:"cost_usd"`
	// Body is the job's chat-completions request, in GET /v1/jobs/{id}
	// only (lists stay small).
	Body json.RawMessage `json:"body,omitempty"`
	// Calls are the job's upstream calls, in GET /v1/jobs/{id} only.
	Calls []Call `json:"calls,omitempty"`
	// TraceID is the id of the job's trace when it was enqueued with
	// tracing on (docs/design/tracing.md).
	TraceID string `json:"trace_id,omitempty"`
}

// JobError is why a job failed or is retrying: a code (the upstream's, or
// llmq's own such as expired) and a message. Both are sanitised and bounded
// (redact.Text): an upstream's error page never reaches a tenant whole.
type JobError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Status is the HTTP status of the upstream answer that failed the
	// job; absent when the failure is llmq's own.
	Status int `json:"status,omitempty"`
}

// Usage is the tokens the upstream counted.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// errorCodeMaxBytes bounds a stored error code on display.
const errorCodeMaxBytes = 64

// JobView is r as llmq shows it.
func JobView(r *store.JobRecord) Job {
	j := Job{
		ID: r.ID, Tenant: r.Tenant, Project: r.Project, Status: string(r.Status), Priority: string(r.Priority),
		Model: r.RequestedModel, UsedModel: r.UsedModel, Deferrable: r.Deferrable, Deadline: r.Deadline,
		FallbackModels: r.FallbackModels, Metadata: r.Metadata, Attempts: r.Attempts,
		Phase: r.Phase, WaitingReason: r.WaitingReason,
		CreatedAt: r.CreatedAt, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, UpdatedAt: r.UpdatedAt,
		Result: r.Result, CostUSD: r.CostUSD, TraceID: tracing.TraceIDOf(r.TraceContext),
	}
	if j.FallbackModels == nil {
		j.FallbackModels = []string{}
	}
	if j.Metadata == nil {
		j.Metadata = map[string]string{}
	}
	if r.ErrorCode != "" || r.ErrorMessage != "" {
		j.Error = &JobError{Code: redact.Text(r.ErrorCode, errorCodeMaxBytes), Message: redact.Text(r.ErrorMessage, redact.ErrorMaxBytes),
			Status: r.ErrorStatus}
	}
	if r.PromptTokens != 0 || r.CompletionTokens != 0 {
		j.Usage = &Usage{PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens}
	}
	return j
}

// List is the one envelope of every list llmq's own endpoints answer (jobs,
// dead letters): a page of items, newest first, and the cursor of the next
// page, null after the last (schema JobList, DeadLetterList).
type List[T any] struct {
	Data []T `json:"data"`
	// NextCursor is passed back (after=, or cursor= for dead letters) for
	// the next page; null after the last page.
	NextCursor *string `json:"next_cursor"`
}

// NewList returns the page items with the cursor next ("" after the last
// page).
func NewList[T any](items []T, next string) List[T] {
	l := List[T]{Data: items}
	if l.Data == nil {
		l.Data = []T{}
	}
	if next != "" {
		l.NextCursor = &next
	}
	return l
}

// JobList is a page of jobs as llmq shows it.
func JobList(recs []*store.JobRecord, next string) List[Job] {
	jobs := make([]Job, len(recs))
	for i, r := range recs {
		jobs[i] = JobView(r)
	}
	return NewList(jobs, next)
}

// Me is who an API key is (schema Me): a tenant's key, or an operator's,
// bound to no tenant (tenant null).
type Me struct {
	Tenant   *string `json:"tenant"`
	Operator bool    `json:"operator"`
}

// Queue is the queue's backpressure (schema Queue): a tenant's own part of
// it, or the whole queue with every tenant's part (an operator's view).
type Queue struct {
	// Tenant is the tenant whose part this is; null for the whole queue.
	Tenant *string `json:"tenant"`
	Depth  int64   `json:"depth"`
	// Lag is the broker's messages not yet ingested; 0 in a tenant's part
	// (the broker does not count them by tenant).
	Lag                  int64   `json:"lag"`
	Queued               int64   `json:"queued"`
	InFlight             int64   `json:"in_flight"`
	CompletionRatePerMin float64 `json:"completion_rate_per_min"`
	// EstimatedDrainSeconds is null when no rate is known or no worker
	// consumes.
	EstimatedDrainSeconds *float64  `json:"estimated_drain_seconds"`
	State                 string    `json:"state"`
	MeasuredAt            time.Time `json:"measured_at"`
	// Weight, SoftShare and HardShare are a tenant's (absent for the whole
	// queue): the depths from which it is throttled and refused.
	Weight    float64 `json:"weight,omitempty"`
	SoftShare int64   `json:"soft_share,omitempty"`
	HardShare int64   `json:"hard_share,omitempty"`
	// Tenants are the parts of the tenants holding jobs, in the whole
	// queue's view only.
	Tenants []Queue `json:"tenants,omitempty"`
}

// QueueView is q as llmq shows it: its tenant's part when it has one, else
// the whole queue with tenants' parts.
func QueueView(q producer.QueueState, tenants []producer.TenantQueue) Queue {
	if t := q.Tenant; t != nil {
		return tenantQueueView(q, *t)
	}
	out := Queue{Depth: q.Depth, Lag: q.Lag, Queued: q.Queued, InFlight: q.InFlight, CompletionRatePerMin: q.CompletionRatePerMin,
		EstimatedDrainSeconds: drainSeconds(q.EstimatedDrain, q.DrainKnown), State: string(q.State), MeasuredAt: q.MeasuredAt,
		Tenants: make([]Queue, len(tenants))}
	for i, t := range tenants {
		out.Tenants[i] = tenantQueueView(q, t)
	}
	return out
}

func tenantQueueView(q producer.QueueState, t producer.TenantQueue) Queue {
	return Queue{Tenant: &t.Tenant, Depth: t.Depth, Queued: t.Queued, InFlight: t.InFlight,
		CompletionRatePerMin: t.CompletionRatePerMin, EstimatedDrainSeconds: drainSeconds(t.EstimatedDrain, t.DrainKnown),
		State: string(t.State), MeasuredAt: q.MeasuredAt, Weight: t.Weight, SoftShare: t.SoftShare, HardShare: t.HardShare}
}

// JobCounts is how many jobs are in each status (schema JobCounts), each
// counted up to Limit.
type JobCounts struct {
	// Tenant is the tenant counted; null for every tenant (an operator).
	Tenant *string `json:"tenant"`
	// ByStatus has every status, 0 included.
	ByStatus map[string]int64 `json:"by_status"`
	// Total is the sum of ByStatus: a floor when AtLeast is not empty.
	Total int64 `json:"total"`
	// Limit is the count at which a status stops being counted.
	Limit int64 `json:"limit"`
	// AtLeast lists the statuses whose count reached Limit: they have
	// that many jobs or more. Empty: every count is exact.
	AtLeast []string `json:"at_least"`
}

// NewJobCounts returns counts, each counted up to limit, as llmq shows
// them: every status present.
func NewJobCounts(tenant string, counts map[llmq.Status]int64, limit int64) JobCounts {
	c := JobCounts{ByStatus: make(map[string]int64, len(llmq.Statuses)), Limit: limit, AtLeast: []string{}}
	if tenant != "" {
		c.Tenant = &tenant
	}
	for _, st := range llmq.Statuses {
		c.ByStatus[string(st)] = counts[st]
		c.Total += counts[st]
		if limit > 0 && counts[st] >= limit {
			c.AtLeast = append(c.AtLeast, string(st))
		}
	}
	return c
}

// Batch is a provider batch of the batch lane (schema Batch).
type Batch struct {
	ID              string `json:"id"`
	ProviderBatchID string `json:"provider_batch_id"`
	Model           string `json:"model"`
	// Status is llmq's submitting or the provider's batch status.
	Status string `json:"status"`
	// Open is true until the batch's output is brought home.
	Open             bool       `json:"open"`
	JobCount         int        `json:"job_count"`
	RequestTotal     int        `json:"request_total"`
	RequestCompleted int        `json:"request_completed"`
	RequestFailed    int        `json:"request_failed"`
	CreatedAt        time.Time  `json:"created_at"`
	UpdatedAt        time.Time  `json:"updated_at"`
	SubmittedAt      *time.Time `json:"submitted_at"`
	CompletedAt      *time.Time `json:"completed_at"`
	IngestedAt       *time.Time `json:"ingested_at"`
	// Error is why the batch failed, sanitised and bounded.
	Error string `json:"error"`
	// CostUSD is what its results cost at batch prices; LiveCostUSD what
	// the same tokens cost live.
	CostUSD     float64 `json:"cost_usd"`
	LiveCostUSD float64 `json:"live_cost_usd"`
	// JobsByStatus counts the batch's jobs per status, in GET
	// /v1/batches/{id} only.
	JobsByStatus map[string]int `json:"jobs_by_status,omitempty"`
}

// BatchView is b as llmq shows it.
func BatchView(b *store.BatchRecord) Batch {
	return Batch{
		ID: b.ID, ProviderBatchID: b.ProviderBatchID, Model: b.Model, Status: b.Status, Open: b.IngestedAt == nil,
		JobCount: b.JobCount, RequestTotal: b.RequestTotal, RequestCompleted: b.RequestCompleted,
		RequestFailed: b.RequestFailed, CreatedAt: b.CreatedAt, UpdatedAt: b.UpdatedAt,
		SubmittedAt: b.SubmittedAt, CompletedAt: b.CompletedAt, IngestedAt: b.IngestedAt,
		Error: redact.Text(b.Error, redact.ErrorMaxBytes), CostUSD: b.CostUSD, LiveCostUSD: b.LiveCostUSD,
	}
}

// DeadLetterReasons counts dead letters by reason (schema
// DeadLetterReasons).
type DeadLetterReasons struct {
	// Data has one entry per reason, every reason present, in the order
	// of dlq.Reasons.
	Data        []ReasonCount `json:"data"`
	Total       int64         `json:"total"`
	NotReplayed int64         `json:"not_replayed"`
	// Since and Until are the window counted; null when unbounded.
	Since *time.Time `json:"since"`
	Until *time.Time `json:"until"`
}

// ReasonCount is the dead letters of one reason.
type ReasonCount struct {
	Reason string `json:"reason"`
	Count  int64  `json:"count"`
	// NotReplayed counts the letters no one replayed yet.
	NotReplayed int64 `json:"not_replayed"`
	// NewestAt is when the newest was dead-lettered; null without letters.
	NewestAt *time.Time `json:"newest_at"`
}

// ReplayReport is the outcome of replaying the letters a filter selects
// (schema ReplayReport).
type ReplayReport struct {
	// Replayed counts the letters replayed by this call.
	Replayed int `json:"replayed"`
	// AlreadyReplayed counts the letters replayed before (left alone).
	AlreadyReplayed int `json:"already_replayed"`
	// Failed lists the letters that could not be replayed.
	Failed []ReplayFailure `json:"failed"`
	// More is true when more letters awaited a replay than one call
	// replays: call again.
	More bool `json:"more"`
}

// ReplayFailure is a letter a replay could not replay, and why.
type ReplayFailure struct {
	ID      int64  `json:"id"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// PurgeReport is the outcome of a purge (schema PurgeReport).
type PurgeReport struct {
	Purged int64 `json:"purged"`
}
