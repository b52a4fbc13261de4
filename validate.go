package llmq

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Field error codes, stable for clients and dead-letter reasons.
const (
	CodeInvalidJSON  = "invalid_json"
	CodeTooLarge     = "too_large"
	CodeRequired     = "required"
	CodeInvalidType  = "invalid_type"
	CodeInvalidValue = "invalid_value"
)

// MaxIDLength is the longest job id accepted.
const MaxIDLength = 128

// FieldError is one failing field, named by its JSON path ("body.messages",
// "priority"); Field is empty when the message as a whole is bad.
type FieldError struct {
	Field   string `json:"field"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e FieldError) String() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

// ValidationError lists every failing field of one job.
type ValidationError struct {
	Errors []FieldError
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Errors))
	for i, fe := range e.Errors {
		parts[i] = fe.String()
	}
	return "invalid job: " + strings.Join(parts, "; ")
}

// Fields returns the JSON paths of the failing fields in order.
func (e *ValidationError) Fields() []string {
	out := make([]string, len(e.Errors))
	for i, fe := range e.Errors {
		out[i] = fe.Field
	}
	return out
}

// decodeField unmarshals raw[name] into dst when present and not null,
// recording a type error under name.
func decodeField(raw map[string]json.RawMessage, name string, dst any, want string, errs *[]FieldError) {
	b, ok := raw[name]
	if !ok || isNull(b) {
		return
	}
	if err := json.Unmarshal(b, dst); err != nil {
		*errs = append(*errs, FieldError{Field: name, Code: CodeInvalidType, Message: "must be " + want})
	}
}

func isNull(b json.RawMessage) bool { return string(b) == "null" }

func hasField(errs []FieldError, name string) bool {
	for _, e := range errs {
		if e.Field == name {
			return true
		}
	}
	return false
}

func validID(id string) bool {
	if len(id) == 0 || len(id) > MaxIDLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// validate checks the fields not already reported in prior and reads the
// model and token limits from the body.
func (j *Job) validate(prior []FieldError) []FieldError {
	var errs []FieldError
	add := func(field, code, format string, args ...any) {
		errs = append(errs, FieldError{Field: field, Code: code, Message: fmt.Sprintf(format, args...)})
	}
	if !hasField(prior, "id") && !validID(j.ID) {
		add("id", CodeInvalidValue, "must be 1-%d characters of [A-Za-z0-9._:-]", MaxIDLength)
	}
	if !hasField(prior, "tenant") && !validID(j.Tenant) {
		add("tenant", CodeInvalidValue, "must be 1-%d characters of [A-Za-z0-9._:-]", MaxIDLength)
	}
	if !hasField(prior, "priority") && !j.Priority.Valid() {
		add("priority", CodeInvalidValue, "must be one of high, normal, low; got %q", j.Priority)
	}
	for i, m := range j.FallbackModels {
		if strings.TrimSpace(m) == "" {
			add(fmt.Sprintf("fallback_models[%d]", i), CodeInvalidValue, "must be a non-empty model name")
		}
	}
	errs = append(errs, j.validateBody()...)
	return errs
}

func (j *Job) validateBody() []FieldError {
	var errs []FieldError
	add := func(field, code, format string, args ...any) {
		errs = append(errs, FieldError{Field: field, Code: code, Message: fmt.Sprintf(format, args...)})
	}
	if len(j.Body) == 0 {
		add("body", CodeRequired, "is required: an OpenAI chat-completions request")
		return errs
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(j.Body, &body); err != nil {
		add("body", CodeInvalidType, "must be an object")
		return errs
	}
	if b, ok := body["model"]; !ok || isNull(b) {
		add("body.model", CodeRequired, "is required")
	} else if err := json.Unmarshal(b, &j.model); err != nil {
		add("body.model", CodeInvalidType, "must be a string")
	} else if strings.TrimSpace(j.model) == "" {
		add("body.model", CodeRequired, "must not be empty")
	}
	if b, ok := body["messages"]; !ok || isNull(b) {
		add("body.messages", CodeRequired, "is required")
	} else {
		var msgs []json.RawMessage
		if err := json.Unmarshal(b, &msgs); err != nil {
			add("body.messages", CodeInvalidType, "must be an array of messages")
		} else if len(msgs) == 0 {
			add("body.messages", CodeInvalidValue, "must not be empty")
		} else {
			for i, m := range msgs {
				var msg map[string]json.RawMessage
				if err := json.Unmarshal(m, &msg); err != nil {
					add(fmt.Sprintf("body.messages[%d]", i), CodeInvalidType, "must be an object")
					continue
				}
				var role string
				if r, ok := msg["role"]; !ok || json.Unmarshal(r, &role) != nil || role == "" {
					add(fmt.Sprintf("body.messages[%d].role", i), CodeRequired, "must be a non-empty string")
				}
			}
		}
	}
	j.maxTokens = 0
	for _, name := range []string{"max_tokens", "max_completion_tokens"} {
		b, ok := body[name]
		if !ok || isNull(b) {
			continue
		}
		var n float64
		if err := json.Unmarshal(b, &n); err != nil || n != float64(int(n)) {
			add("body."+name, CodeInvalidType, "must be an integer")
			continue
		}
		if n <= 0 {
			add("body."+name, CodeInvalidValue, "must be positive; got %v", n)
			continue
		}
		// max_completion_tokens, read second, wins as the OpenAI API prefers it.
		j.maxTokens = int(n)
	}
	if b, ok := body["stream"]; ok && string(b) == "true" {
		add("body.stream", CodeInvalidValue, "must be false: llmq stores whole completions")
	}
	return errs
}
