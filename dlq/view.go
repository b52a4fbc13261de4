package dlq

import (
	"encoding/base64"
	"encoding/json"
	"time"

	"github.com/llmq/llmq/internal/redact"
	"github.com/llmq/llmq/store"
)

// MessagePreviewBytes bounds the message preview of a letter in a list.
const MessagePreviewBytes = 256

// View is a dead letter as llmq shows it: the HTTP API (schema DeadLetter
// of the OpenAPI document) and `llmq dlq ls|show --json`. A letter in a
// list is bounded in bytes: it carries message_bytes and a short,
// sanitised message_preview instead of the message and its headers, which
// only the single letter (GET /v1/dead-letters/{id}, `llmq dlq show`)
// carries whole. The last error is sanitised and bounded (redact.Text) in
// both.
type View struct {
	ID          int64  `json:"id"`
	JobID       string `json:"job_id"`
	Tenant      string `json:"tenant"`
	Reason      string `json:"reason"`
	LastError   string `json:"last_error"`
	Attempts    int    `json:"attempts"`
	Model       string `json:"model"`
	Source      string `json:"source"`
	Destination string `json:"destination"`
	// MessageBytes is the size of the original message.
	MessageBytes int `json:"message_bytes"`
	// MessagePreview is the start of the message, in lists only.
	MessagePreview string `json:"message_preview,omitempty"`
	// Headers, Message and MessageBase64 are in the single letter only:
	// the message inlined when it is JSON, base64-encoded otherwise.
	Headers           map[string]string `json:"headers,omitempty"`
	Message           json.RawMessage   `json:"message,omitempty"`
	MessageBase64     string            `json:"message_base64,omitempty"`
	CreatedAt         time.Time         `json:"created_at"`
	PublishedAt       *time.Time        `json:"published_at"`
	ReplayedAt        *time.Time        `json:"replayed_at"`
	ReplayPublishedAt *time.Time        `json:"replay_published_at"`
	ReplayCount       int               `json:"replay_count"`
}

// NewView returns d as llmq shows it: whole (the single letter) or as a
// list entry.
func NewView(d *store.DeadLetter, whole bool) View {
	v := View{
		ID: d.ID, JobID: d.JobID, Tenant: d.Tenant, Reason: d.Reason,
		LastError: redact.Text(d.LastError, redact.ErrorMaxBytes), Attempts: d.Attempts,
		Model: d.Model, Source: d.Source, Destination: d.Destination, MessageBytes: len(d.Message),
		CreatedAt: d.CreatedAt, PublishedAt: d.PublishedAt, ReplayedAt: d.ReplayedAt,
		ReplayPublishedAt: d.ReplayPublishedAt, ReplayCount: d.ReplayCount,
	}
	if !whole {
		v.MessagePreview = redact.Text(string(d.Message), MessagePreviewBytes)
		return v
	}
	v.Headers = d.Headers
	if v.Headers == nil {
		v.Headers = map[string]string{}
	}
	if json.Valid(d.Message) {
		v.Message = d.Message
	} else {
		v.MessageBase64 = base64.StdEncoding.EncodeToString(d.Message)
	}
	return v
}

// Views returns a page of letters as list entries.
func Views(ds []*store.DeadLetter) []View {
	out := make([]View, len(ds))
	for i, d := range ds {
		out[i] = NewView(d, false)
	}
	return out
}
