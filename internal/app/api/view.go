package api

import (
	"encoding/json"
	"time"

	"github.com/llmq/llmq/internal/redact"
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
	Status         string            `json:"status"`
	Priority       string            `json:"priority"`
	Model          string            `json:"model"`
	UsedModel      string            `json:"used_model,omitempty"`
	Deferrable     bool              `json:"deferrable"`
	Deadline       *time.Time        `json:"deadline,omitempty"`
	FallbackModels []string          `json:"fallback_models"`
	Metadata       map[string]string `json:"metadata"`
	Attempts       int               `json:"attempts"`
	CreatedAt      time.Time         `json:"created_at"`
	StartedAt      *time.Time        `json:"started_at,omitempty"`
	FinishedAt     *time.Time        `json:"finished_at,omitempty"`
	UpdatedAt      time.Time         `json:"updated_at"`
	// Result is the upstream's chat completion, once succeeded.
	Result json.RawMessage `json:"result,omitempty"`
	Error  *JobError       `json:"error,omitempty"`
	Usage  *Usage          `json:"usage,omitempty"`
	// CostUSD is the job's cost at the model's prices.
	CostUSD float64 `json:"cost_usd"`
}

// JobError is why a job failed or is retrying: a code (the upstream's, or
// llmq's own such as expired) and a message. Both are sanitised and bounded
// (redact.Text): an upstream's error page never reaches a tenant whole.
type JobError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
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
		ID: r.ID, Tenant: r.Tenant, Status: string(r.Status), Priority: string(r.Priority),
		Model: r.RequestedModel, UsedModel: r.UsedModel, Deferrable: r.Deferrable, Deadline: r.Deadline,
		FallbackModels: r.FallbackModels, Metadata: r.Metadata, Attempts: r.Attempts,
		CreatedAt: r.CreatedAt, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, UpdatedAt: r.UpdatedAt,
		Result: r.Result, CostUSD: r.CostUSD,
	}
	if j.FallbackModels == nil {
		j.FallbackModels = []string{}
	}
	if j.Metadata == nil {
		j.Metadata = map[string]string{}
	}
	if r.ErrorCode != "" || r.ErrorMessage != "" {
		j.Error = &JobError{Code: redact.Text(r.ErrorCode, errorCodeMaxBytes), Message: redact.Text(r.ErrorMessage, redact.ErrorMaxBytes)}
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
