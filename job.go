package llmq

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
)

// Priority orders jobs inside a worker's scheduler. Aging lifts old low
// priority jobs so that none starves.
type Priority string

const (
	PriorityHigh   Priority = "high"
	PriorityNormal Priority = "normal"
	PriorityLow    Priority = "low"
)

// Valid reports whether p is one of the three priorities.
func (p Priority) Valid() bool {
	return p == PriorityHigh || p == PriorityNormal || p == PriorityLow
}

// Rank is 0 for high, 1 for normal and 2 for low (lower runs first).
func (p Priority) Rank() int {
	switch p {
	case PriorityHigh:
		return 0
	case PriorityLow:
		return 2
	}
	return 1
}

// DefaultTenant is the tenant of a job that names none.
const DefaultTenant = "default"

// MaxMessageBytesDefault is the default limit on an encoded job's size.
const MaxMessageBytesDefault = 1 << 20

// Bounds on the shape of a job's JSON, checked before it is decoded (the
// API checks them while a request streams in). An escape sequence counts
// as one byte.
const (
	// MaxKeyBytes bounds every object key of a job.
	MaxKeyBytes = 1024
	// MaxDepth bounds the nesting of a job's objects and arrays; the job
	// itself is level 1, its body level 2.
	MaxDepth = 128
)

// Job is one chat-completion request to run, as published on the wire.
type Job struct {
	// ID is 1-128 characters of [A-Za-z0-9._:-]; a UUIDv7 when the producer
	// gives none. It is the idempotency key: one stored result per ID.
	ID string `json:"id"`
	// Tenant owns the job; "default" when empty.
	Tenant string `json:"tenant"`
	// Project, optional, names the tenant's project the job counts
	// against (its quotas, under the tenant's); "" for none.
	Project string `json:"project,omitempty"`
	// Priority is high, normal or low; normal when empty.
	Priority Priority `json:"priority"`
	// Deadline, when set, is the time after which the job is not started
	// (it becomes expired instead).
	Deadline *time.Time `json:"deadline,omitempty"`
	// Deferrable jobs may be sent through the provider's Batch API.
	Deferrable bool `json:"deferrable,omitempty"`
	// FallbackModels are tried in order when the primary model stays rate
	// limited after its retries.
	FallbackModels []string `json:"fallback_models,omitempty"`
	// Metadata is free-form and stored with the job.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Body is an OpenAI chat-completions request, kept byte for byte.
	Body json.RawMessage `json:"body"`
	// ReplyTo, optional, says where the job's result event goes besides
	// Postgres (see [Reply]).
	ReplyTo *Reply `json:"reply_to,omitempty"`

	// TraceContext is the W3C trace context the job's trace continues
	// from (internal/tracing's stored form: traceparent, then a newline
	// and the tracestate when there is one); "" for none. It travels in
	// the broker message's headers and in the job's row, not in its JSON.
	TraceContext string `json:"-"`

	// model, maxTokens are read from Body by Decode/Validate.
	model     string
	maxTokens int
	// decoded is a copy of the job as Decode returned it, valid (nil for
	// a job built in Go): see Validated.
	decoded *Job
}

// Model is the body's "model" field as decoded.
func (j *Job) Model() string { return j.model }

// MaxOutputTokens is the body's max_completion_tokens, else max_tokens, else 0
// (unset) as decoded.
func (j *Job) MaxOutputTokens() int { return j.maxTokens }

// Encode returns the wire form of j: compact JSON, with <, > and & kept as
// they are (json.Marshal would write each as a 6-byte \u escape, so a body
// full of markup would grow up to sixfold past the size limit).
func (j *Job) Encode() ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(len(j.Body) + 256)
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(j); err != nil {
		return nil, fmt.Errorf("llmq: encode job %q: %w", j.ID, err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// ErrTooLarge is matched (errors.Is) by every *TooLargeError.
var ErrTooLarge = errors.New("llmq: message over the size limit")

// TooLargeError is an encoded job larger than the message size limit: the
// configured max_message_bytes, or a smaller limit of the broker. The API
// answers it with 413 and `llmq produce` reports it; nothing is recorded.
type TooLargeError struct {
	// Size is the encoded job's size in bytes.
	Size int
	// Limit is the largest size allowed, in bytes.
	Limit int
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("llmq: message is %d bytes, over the %d byte limit", e.Size, e.Limit)
}

// Is makes errors.Is(err, ErrTooLarge) true.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// CheckSize returns a *TooLargeError when the encoded job is longer than
// limit bytes: 0 means MaxMessageBytesDefault, -1 means no limit.
func CheckSize(encoded []byte, limit int) error {
	if limit == 0 {
		limit = MaxMessageBytesDefault
	}
	if limit > 0 && len(encoded) > limit {
		return &TooLargeError{Size: len(encoded), Limit: limit}
	}
	return nil
}

// WithModel returns the body with "model" replaced, every other field kept
// as the producer sent it. It is how a fallback model is applied.
func (j *Job) WithModel(model string) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(j.Body, &m); err != nil {
		return nil, fmt.Errorf("llmq: job %q body: %w", j.ID, err)
	}
	mb, _ := json.Marshal(model)
	m["model"] = mb
	return json.Marshal(m)
}

// DecodeOptions tune [Decode]. The zero value uses the defaults.
type DecodeOptions struct {
	// MaxMessageBytes limits the encoded job. 0 means
	// MaxMessageBytesDefault; -1 means no limit.
	MaxMessageBytes int
	// Tenant, when not empty, is the tenant of a job whose tenant is
	// absent or null, instead of DefaultTenant (a tenant of "" is still
	// DefaultTenant's). The API decodes a tenant key's jobs with it, so
	// that the job it records is as Decode returned it (Job.Validated).
	Tenant string
}

// Decode parses and validates one wire message. It never panics. On bad input
// it returns a *ValidationError naming every failing field; the job is nil.
// An absent id is replaced by a new UUIDv7, an absent tenant by opts.Tenant
// or "default" and an absent priority by "normal".
func Decode(data []byte, opts DecodeOptions) (*Job, error) {
	var tl *TooLargeError
	if errors.As(CheckSize(data, opts.MaxMessageBytes), &tl) {
		return nil, &ValidationError{Errors: []FieldError{{
			Field: "", Message: fmt.Sprintf("message is %d bytes, over the %d byte limit", tl.Size, tl.Limit),
			Code: CodeTooLarge,
		}}}
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, &ValidationError{Errors: []FieldError{{Field: "", Message: notAnObject(trimmed), Code: CodeInvalidJSON}}}
	}
	if fe, bad := shapeError(trimmed, "", MaxDepth); bad {
		return nil, &ValidationError{Errors: []FieldError{fe}}
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &raw); err != nil {
		return nil, &ValidationError{Errors: []FieldError{{Field: "", Message: "message is not valid JSON: " + err.Error(), Code: CodeInvalidJSON}}}
	}
	j := &Job{}
	var errs []FieldError
	decodeField(raw, "id", &j.ID, "a string", &errs)
	decodeField(raw, "tenant", &j.Tenant, "a string", &errs)
	decodeField(raw, "project", &j.Project, "a string", &errs)
	decodeField(raw, "priority", &j.Priority, "a string", &errs)
	var deadline *string
	decodeField(raw, "deadline", &deadline, "an RFC 3339 time string", &errs)
	if deadline != nil {
		t, err := time.Parse(time.RFC3339Nano, *deadline)
		if err != nil {
			errs = append(errs, FieldError{Field: "deadline", Message: fmt.Sprintf("%q is not an RFC 3339 time", *deadline), Code: CodeInvalidValue})
		} else {
			j.Deadline = &t
		}
	}
	decodeField(raw, "deferrable", &j.Deferrable, "a boolean", &errs)
	decodeField(raw, "fallback_models", &j.FallbackModels, "an array of strings", &errs)
	decodeField(raw, "metadata", &j.Metadata, "an object of strings", &errs)
	decodeField(raw, "reply_to", &j.ReplyTo, "an object", &errs)
	if b, ok := raw["body"]; ok && !isNull(b) {
		j.Body = append(json.RawMessage(nil), b...)
	}
	if j.ID == "" && !hasField(errs, "id") {
		id, err := newID()
		if err != nil {
			return nil, fmt.Errorf("llmq: generate id: %w", err)
		}
		j.ID = id
	}
	if b, ok := raw["tenant"]; opts.Tenant != "" && (!ok || isNull(b)) {
		j.Tenant = opts.Tenant
	}
	if j.Tenant == "" && !hasField(errs, "tenant") {
		j.Tenant = DefaultTenant
	}
	if j.Priority == "" && !hasField(errs, "priority") {
		j.Priority = PriorityNormal
	}
	errs = append(errs, j.validate(errs)...)
	if len(errs) > 0 {
		return nil, &ValidationError{Errors: errs}
	}
	j.decoded = j.clone()
	return j, nil
}

// Validated reports whether j is exactly as [Decode] returned it: every
// field equal to the one Decode found valid, the body byte for byte. Such
// a job needs no second validation in the same process (the worker
// decodes a message, then records the job). A job built in Go, or changed
// since it was decoded, reports false: validate it ([Job.Validate]).
func (j *Job) Validated() bool {
	d := j.decoded
	return d != nil && j.ID == d.ID && j.Tenant == d.Tenant && j.Project == d.Project && j.Priority == d.Priority &&
		(j.Deadline == nil) == (d.Deadline == nil) && (j.Deadline == nil || j.Deadline.Equal(*d.Deadline)) &&
		j.Deferrable == d.Deferrable && slices.Equal(j.FallbackModels, d.FallbackModels) &&
		maps.Equal(j.Metadata, d.Metadata) && bytes.Equal(j.Body, d.Body) &&
		j.model == d.model && j.maxTokens == d.maxTokens && j.ReplyTo.equal(d.ReplyTo)
}

// clone returns a copy of j that shares nothing a holder of j can change.
func (j *Job) clone() *Job {
	c := *j
	c.decoded = nil
	if j.Deadline != nil {
		d := *j.Deadline
		c.Deadline = &d
	}
	c.FallbackModels = slices.Clone(j.FallbackModels)
	c.Metadata = maps.Clone(j.Metadata)
	c.Body = bytes.Clone(j.Body)
	c.ReplyTo = j.ReplyTo.clone()
	return &c
}

// Validate checks a job built in Go (not decoded) and fills in the model and
// token fields read from its body. It applies no defaults: call it after
// setting ID, Tenant and Priority, or use [Job.Normalize] first.
func (j *Job) Validate() error {
	if errs := j.validate(nil); len(errs) > 0 {
		return &ValidationError{Errors: errs}
	}
	return nil
}

// Normalize fills in the defaults Decode applies: a UUIDv7 id, the default
// tenant and normal priority.
func (j *Job) Normalize() error {
	if j.ID == "" {
		id, err := newID()
		if err != nil {
			return fmt.Errorf("llmq: generate id: %w", err)
		}
		j.ID = id
	}
	if j.Tenant == "" {
		j.Tenant = DefaultTenant
	}
	if j.Priority == "" {
		j.Priority = PriorityNormal
	}
	return nil
}

func newID() (string, error) {
	u, err := uuid.NewV7()
	if err != nil {
		return "", err
	}
	return u.String(), nil
}
