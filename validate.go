package llmq

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/llmq/llmq/internal/jsonlimit"
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

// MaxOutputTokensLimit is the largest max_tokens / max_completion_tokens
// accepted (no model comes near it; it keeps token arithmetic far from
// overflow).
const MaxOutputTokensLimit = 1 << 24

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
// recording a type error under name. On error dst is left untouched (a
// partial decode such as ["a", 1] must not be validated again).
func decodeField[T any](raw map[string]json.RawMessage, name string, dst *T, want string, errs *[]FieldError) {
	b, ok := raw[name]
	if !ok || isNull(b) {
		return
	}
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		*errs = append(*errs, FieldError{Field: name, Code: CodeInvalidType, Message: "must be " + want})
		return
	}
	*dst = v
}

// shapeError reports JSON past MaxKeyBytes or depth levels (too_large or
// invalid_json), found without decoding it.
func shapeError(b []byte, field string, depth int) (FieldError, bool) {
	var le *jsonlimit.Error
	if !errors.As(jsonlimit.Check(b, jsonlimit.Limits{MaxKeyBytes: MaxKeyBytes, MaxDepth: depth}), &le) {
		return FieldError{}, false
	}
	code := CodeTooLarge
	if le.What == jsonlimit.Depth {
		code = CodeInvalidJSON
	}
	return FieldError{Field: field, Code: code, Message: le.Error()}, true
}

func isNull(b json.RawMessage) bool { return string(b) == "null" }

// notAnObject says what a message that is not a JSON object is instead.
func notAnObject(b []byte) string {
	switch {
	case len(b) == 0:
		return "message is empty"
	case !utf8.Valid(b):
		at := 0
		for at < len(b) {
			r, size := utf8.DecodeRune(b[at:])
			if r == utf8.RuneError && size <= 1 {
				break
			}
			at += size
		}
		return fmt.Sprintf("message is not valid UTF-8 (byte %d)", at)
	case json.Valid(b):
		return "message is JSON but not an object: a job is {\"body\": {...}}"
	}
	return "message is not JSON: a job is one JSON object per message"
}

func hasField(errs []FieldError, name string) bool {
	for _, e := range errs {
		if e.Field == name {
			return true
		}
	}
	return false
}

// ValidID reports whether s is a valid job id or tenant: 1-128 characters
// of [A-Za-z0-9._:-].
func ValidID(s string) bool { return validID(s) }

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
	if !hasField(prior, "project") && j.Project != "" && !validID(j.Project) {
		add("project", CodeInvalidValue, "must be 1-%d characters of [A-Za-z0-9._:-] when set", MaxIDLength)
	}
	if !hasField(prior, "priority") && !j.Priority.Valid() {
		add("priority", CodeInvalidValue, "must be one of high, normal, low; got %q", j.Priority)
	}
	for i, m := range j.FallbackModels {
		if strings.TrimSpace(m) == "" || !storableString(m) {
			add(fmt.Sprintf("fallback_models[%d]", i), CodeInvalidValue, "must be a non-empty model name of valid UTF-8 without NUL")
		}
	}
	for _, k := range slices.Sorted(maps.Keys(j.Metadata)) {
		if !storableString(k) || !storableString(j.Metadata[k]) {
			add("metadata."+k, CodeInvalidValue, "keys and values must be valid UTF-8 without NUL")
		}
	}
	if !hasField(prior, "reply_to") {
		errs = append(errs, j.ReplyTo.validate()...)
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
	if fe, bad := shapeError(j.Body, "body", MaxDepth-1); bad {
		return append(errs, fe)
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(j.Body, &body); err != nil {
		add("body", CodeInvalidType, "must be an object")
		return errs
	}
	if problem := unstorable(j.Body); problem != "" {
		add("body", CodeInvalidValue, "%s", problem)
	}
	var model string
	if b, ok := body["model"]; !ok || isNull(b) {
		add("body.model", CodeRequired, "is required")
	} else if err := json.Unmarshal(b, &model); err != nil {
		add("body.model", CodeInvalidType, "must be a string")
	} else if strings.TrimSpace(model) == "" {
		add("body.model", CodeRequired, "must not be empty")
	}
	checkMessages(body["messages"], add)
	maxTokens := 0
	for _, name := range []string{"max_tokens", "max_completion_tokens"} {
		b, ok := body[name]
		if !ok || isNull(b) {
			continue
		}
		var n float64
		if err := json.Unmarshal(b, &n); err != nil || n != math.Trunc(n) {
			add("body."+name, CodeInvalidType, "must be an integer")
			continue
		}
		if n <= 0 || n > MaxOutputTokensLimit {
			add("body."+name, CodeInvalidValue, "must be between 1 and %d; got %v", MaxOutputTokensLimit, n)
			continue
		}
		// max_completion_tokens, read second, wins as the OpenAI API prefers it.
		maxTokens = int(n)
	}
	if b, ok := body["stream"]; ok && string(b) == "true" {
		add("body.stream", CodeInvalidValue, "must be false: llmq stores whole completions")
	}
	// Write only on change, so that validating a shared, already validated
	// job from several goroutines is read-only.
	if j.model != model {
		j.model = model
	}
	if j.maxTokens != maxTokens {
		j.maxTokens = maxTokens
	}
	return errs
}

// checkMessages checks body.messages b: a non-empty array of objects, each
// with a non-empty role.
func checkMessages(b json.RawMessage, add func(field, code, format string, args ...any)) {
	if b == nil || isNull(b) {
		add("body.messages", CodeRequired, "is required")
		return
	}
	var msgs []json.RawMessage
	if err := json.Unmarshal(b, &msgs); err != nil {
		add("body.messages", CodeInvalidType, "must be an array of messages")
		return
	}
	if len(msgs) == 0 {
		add("body.messages", CodeInvalidValue, "must not be empty")
		return
	}
	for i, m := range msgs {
		var msg map[string]json.RawMessage
		if err := json.Unmarshal(m, &msg); err != nil || msg == nil {
			add(fmt.Sprintf("body.messages[%d]", i), CodeInvalidType, "must be an object")
			continue
		}
		var role string
		if r, ok := msg["role"]; !ok || json.Unmarshal(r, &role) != nil || role == "" {
			add(fmt.Sprintf("body.messages[%d].role", i), CodeRequired, "must be a non-empty string")
		}
	}
}

// maxNumberDigits bounds the digits and the exponent of a number in a body:
// Postgres numeric (inside jsonb) overflows well beyond, at 131072 digits
// before the point or 16383 after it.
const maxNumberDigits = 5000

// unstorable names what in a JSON text Postgres jsonb would refuse (invalid
// UTF-8, a \u0000 escape, an unpaired surrogate escape, a number out of
// numeric's range), or "" when there is nothing. b must be valid JSON.
func unstorable(b []byte) string {
	if !utf8.Valid(b) {
		return "must be valid UTF-8"
	}
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !inString {
			switch {
			case c == '"':
				inString = true
			case c == '-' || (c >= '0' && c <= '9'):
				end := i
				for end < len(b) && strings.IndexByte("0123456789+-.eE", b[end]) >= 0 {
					end++
				}
				if hugeNumber(b[i:end]) {
					return fmt.Sprintf("must not contain a number of over %d digits or with an exponent beyond ±%d", maxNumberDigits, maxNumberDigits)
				}
				i = end - 1
			}
			continue
		}
		switch {
		case c == '"':
			inString = false
		case c != '\\' || i+1 >= len(b):
		case b[i+1] != 'u' || i+6 > len(b):
			i++ // a two-character escape such as \\ or \"
		default:
			r := hex4(b[i+2 : i+6])
			switch {
			case r == 0:
				return `must not contain \u0000 (Postgres cannot store it)`
			case r >= 0xD800 && r < 0xDC00:
				if i+12 > len(b) || b[i+6] != '\\' || b[i+7] != 'u' {
					return "must not contain an unpaired UTF-16 surrogate escape"
				}
				if r2 := hex4(b[i+8 : i+12]); r2 < 0xDC00 || r2 >= 0xE000 {
					return "must not contain an unpaired UTF-16 surrogate escape"
				}
				i += 6
			case r >= 0xDC00 && r < 0xE000:
				return "must not contain an unpaired UTF-16 surrogate escape"
			}
			i += 5
		}
	}
	return ""
}

// hugeNumber reports a JSON number token with too many digits or too large
// an exponent for Postgres numeric.
func hugeNumber(tok []byte) bool {
	if len(tok) > maxNumberDigits {
		return true
	}
	e := bytes.IndexAny(tok, "eE")
	if e < 0 {
		return false
	}
	exp := bytes.TrimLeft(bytes.TrimLeft(tok[e+1:], "+-"), "0")
	if len(exp) > 4 {
		return true
	}
	n := 0
	for _, d := range exp {
		n = n*10 + int(d-'0')
	}
	return n > maxNumberDigits
}

// hex4 decodes four hex digits, -1 when they are not.
func hex4(h []byte) int {
	n := 0
	for _, c := range h {
		n <<= 4
		switch {
		case c >= '0' && c <= '9':
			n |= int(c - '0')
		case c >= 'a' && c <= 'f':
			n |= int(c-'a') + 10
		case c >= 'A' && c <= 'F':
			n |= int(c-'A') + 10
		default:
			return -1
		}
	}
	return n
}

// storableString reports whether a Go string can be stored in a Postgres
// text column (valid UTF-8 without NUL).
func storableString(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}
