package llmq

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
)

// MaxReplyFieldLength is the longest Reply.To, Reply.CorrelationID and
// Reply.Webhook, in bytes.
const MaxReplyFieldLength = 1024

// Reply says where a job's result event goes besides Postgres: a reply
// queue or results topic on the job's broker, a webhook, or both
// (docs/design/notifications.md). A job's wire form names it as
// "reply_to"; the worker fills it from the message too (RabbitMQ's
// reply_to and correlation_id properties, the deployment's or tenant's
// results topic and webhook, the Kafka headers to echo).
type Reply struct {
	// To is the queue (RabbitMQ) or topic (Kafka) the result event is
	// published to; "" for none.
	To string `json:"to,omitempty"`
	// CorrelationID is copied onto the result message (AMQP
	// correlation_id; a Kafka header llmq-correlation-id).
	CorrelationID string `json:"correlation_id,omitempty"`
	// Webhook is the https URL the result event is posted to, signed per
	// Standard Webhooks; "" for none.
	Webhook string `json:"webhook,omitempty"`
	// Headers are echoed on the result message: the job message's broker
	// headers.
	Headers map[string]string `json:"headers,omitempty"`
}

// Empty reports whether r names no destination.
func (r *Reply) Empty() bool { return r == nil || (r.To == "" && r.Webhook == "") }

func (r *Reply) equal(o *Reply) bool {
	if r == nil || o == nil {
		return r == o
	}
	return r.To == o.To && r.CorrelationID == o.CorrelationID && r.Webhook == o.Webhook && maps.Equal(r.Headers, o.Headers)
}

func (r *Reply) clone() *Reply {
	if r == nil {
		return nil
	}
	c := *r
	c.Headers = maps.Clone(r.Headers)
	return &c
}

// validate checks r as the job's field reply_to.
func (r *Reply) validate() []FieldError {
	if r == nil {
		return nil
	}
	var errs []FieldError
	add := func(field, format string, args ...any) {
		errs = append(errs, FieldError{Field: "reply_to." + field, Code: CodeInvalidValue, Message: fmt.Sprintf(format, args...)})
	}
	for _, f := range []struct{ field, v string }{{"to", r.To}, {"correlation_id", r.CorrelationID}, {"webhook", r.Webhook}} {
		if len(f.v) > MaxReplyFieldLength || !storableString(f.v) {
			add(f.field, "must be at most %d bytes of valid UTF-8 without NUL", MaxReplyFieldLength)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(r.Headers)) {
		v := r.Headers[k]
		if !storableString(k) || !storableString(v) {
			add("headers."+k, "keys and values must be valid UTF-8 without NUL")
		}
	}
	if r.Webhook != "" {
		if u, err := url.Parse(r.Webhook); err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil {
			add("webhook", "must be an https URL without credentials")
		}
	}
	if r.To == "" && r.Webhook == "" {
		add("to", "is required when reply_to names no webhook")
	}
	return errs
}

// Validate checks r as a job's reply_to field would be checked: a
// *ValidationError naming the fields (reply_to.webhook, ...), or nil.
func (r *Reply) Validate() error {
	if errs := r.validate(); len(errs) > 0 {
		return &ValidationError{Errors: errs}
	}
	return nil
}
