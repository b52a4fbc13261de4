package llmq

import (
	"encoding/json"
	"time"
)

// ResultEventType is the type of every result event of this version.
const ResultEventType = "llmq.job.finished"

// ResultEventVersion is the version of the ResultEvent shape: a field is
// only ever added within a version; a change of meaning makes a new one.
const ResultEventVersion = 1

// ResultEvent is the message llmq publishes when a job with a route ends:
// the same JSON on a RabbitMQ reply queue, a Kafka results topic and a
// webhook (docs/design/notifications.md). EventID is stable across every
// delivery of one result (retries, replays): deduplicate on it.
type ResultEvent struct {
	Type    string `json:"type"`
	Version int    `json:"version"`
	EventID string `json:"event_id"`
	JobID   string `json:"job_id"`
	Tenant  string `json:"tenant"`
	Status  Status `json:"status"`
	// CorrelationID is the job's Reply.CorrelationID, "" for none.
	CorrelationID string `json:"correlation_id,omitempty"`
	// Model is the model that answered (after a fallback, not the one
	// requested); "" when none did.
	Model string `json:"model,omitempty"`
	// Response is the OpenAI chat-completion response of a succeeded job.
	Response json.RawMessage `json:"response,omitempty"`
	// Error says why a job that did not succeed ended.
	Error      *ResultError      `json:"error,omitempty"`
	Usage      ResultUsage       `json:"usage"`
	CostUSD    float64           `json:"cost_usd"`
	Attempts   int               `json:"attempts"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	CreatedAt  time.Time         `json:"created_at"`
	StartedAt  *time.Time        `json:"started_at,omitempty"`
	FinishedAt *time.Time        `json:"finished_at,omitempty"`
}

// ResultError is a ResultEvent's error: llmq's error code and message, and
// the HTTP status of the upstream answer that failed the job (0: none).
type ResultError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Status  int    `json:"status,omitempty"`
}

// ResultUsage counts a ResultEvent's tokens, as the OpenAI usage object.
type ResultUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}
