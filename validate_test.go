package llmq_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
)

const okBody = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`

// withBody is a message with only the given body.
func withBody(body string) string { return `{"body":` + body + `}` }

// malformed is the table of bad messages: each names exactly the fields
// (JSON paths) and codes Decode must report, in order.
var malformed = []struct {
	name   string
	msg    string
	opts   llmq.DecodeOptions
	fields []string
	codes  []string
}{
	{"not JSON", `hello`, llmq.DecodeOptions{}, []string{""}, []string{llmq.CodeInvalidJSON}},
	{"JSON array", `[` + withBody(okBody) + `]`, llmq.DecodeOptions{}, []string{""}, []string{llmq.CodeInvalidJSON}},
	{"binary garbage", "\x00\xff\xfe\x01garbage", llmq.DecodeOptions{}, []string{""}, []string{llmq.CodeInvalidJSON}},
	{"empty input", ``, llmq.DecodeOptions{}, []string{""}, []string{llmq.CodeInvalidJSON}},
	{"only whitespace", " \n\t ", llmq.DecodeOptions{}, []string{""}, []string{llmq.CodeInvalidJSON}},
	{"truncated", `{"body":{"model":"m"`, llmq.DecodeOptions{}, []string{""}, []string{llmq.CodeInvalidJSON}},
	{"trailing garbage", withBody(okBody) + `x`, llmq.DecodeOptions{}, []string{""}, []string{llmq.CodeInvalidJSON}},
	{"JSON string", `"a job"`, llmq.DecodeOptions{}, []string{""}, []string{llmq.CodeInvalidJSON}},
	{"JSON null", `null`, llmq.DecodeOptions{}, []string{""}, []string{llmq.CodeInvalidJSON}},
	{"empty object", `{}`, llmq.DecodeOptions{}, []string{"body"}, []string{llmq.CodeRequired}},
	{"body null", withBody(`null`), llmq.DecodeOptions{}, []string{"body"}, []string{llmq.CodeRequired}},
	{"body string", withBody(`"hi"`), llmq.DecodeOptions{}, []string{"body"}, []string{llmq.CodeInvalidType}},
	{"body array", withBody(`[]`), llmq.DecodeOptions{}, []string{"body"}, []string{llmq.CodeInvalidType}},
	{"missing model", withBody(`{"messages":[{"role":"user","content":"x"}]}`), llmq.DecodeOptions{}, []string{"body.model"}, []string{llmq.CodeRequired}},
	{"empty model", withBody(`{"model":" ","messages":[{"role":"user","content":"x"}]}`), llmq.DecodeOptions{}, []string{"body.model"}, []string{llmq.CodeRequired}},
	{"model not a string", withBody(`{"model":4,"messages":[{"role":"user","content":"x"}]}`), llmq.DecodeOptions{}, []string{"body.model"}, []string{llmq.CodeInvalidType}},
	{"missing messages", withBody(`{"model":"m"}`), llmq.DecodeOptions{}, []string{"body.messages"}, []string{llmq.CodeRequired}},
	{"empty messages", withBody(`{"model":"m","messages":[]}`), llmq.DecodeOptions{}, []string{"body.messages"}, []string{llmq.CodeInvalidValue}},
	{"messages an object", withBody(`{"model":"m","messages":{"role":"user"}}`), llmq.DecodeOptions{}, []string{"body.messages"}, []string{llmq.CodeInvalidType}},
	{"message a string", withBody(`{"model":"m","messages":["hi"]}`), llmq.DecodeOptions{}, []string{"body.messages[0]"}, []string{llmq.CodeInvalidType}},
	{"message null", withBody(`{"model":"m","messages":[null]}`), llmq.DecodeOptions{}, []string{"body.messages[0]"}, []string{llmq.CodeInvalidType}},
	{"message without role", withBody(`{"model":"m","messages":[{"content":"hi"}]}`), llmq.DecodeOptions{}, []string{"body.messages[0].role"}, []string{llmq.CodeRequired}},
	{"second role empty", withBody(`{"model":"m","messages":[{"role":"system"},{"role":""}]}`), llmq.DecodeOptions{}, []string{"body.messages[1].role"}, []string{llmq.CodeRequired}},
	{"max_tokens zero", withBody(`{"model":"m","messages":[{"role":"user"}],"max_tokens":0}`), llmq.DecodeOptions{}, []string{"body.max_tokens"}, []string{llmq.CodeInvalidValue}},
	{"max_tokens negative", withBody(`{"model":"m","messages":[{"role":"user"}],"max_tokens":-5}`), llmq.DecodeOptions{}, []string{"body.max_tokens"}, []string{llmq.CodeInvalidValue}},
	{"max_tokens over the limit", withBody(`{"model":"m","messages":[{"role":"user"}],"max_tokens":16777217}`), llmq.DecodeOptions{}, []string{"body.max_tokens"}, []string{llmq.CodeInvalidValue}},
	{"max_tokens string", withBody(`{"model":"m","messages":[{"role":"user"}],"max_tokens":"256"}`), llmq.DecodeOptions{}, []string{"body.max_tokens"}, []string{llmq.CodeInvalidType}},
	{"max_tokens fraction", withBody(`{"model":"m","messages":[{"role":"user"}],"max_tokens":1.5}`), llmq.DecodeOptions{}, []string{"body.max_tokens"}, []string{llmq.CodeInvalidType}},
	{"max_completion_tokens huge", withBody(`{"model":"m","messages":[{"role":"user"}],"max_completion_tokens":1e20}`), llmq.DecodeOptions{}, []string{"body.max_completion_tokens"}, []string{llmq.CodeInvalidValue}},
	{"stream true", withBody(`{"model":"m","messages":[{"role":"user"}],"stream":true}`), llmq.DecodeOptions{}, []string{"body.stream"}, []string{llmq.CodeInvalidValue}},
	{"bad priority", `{"priority":"urgent","body":` + okBody + `}`, llmq.DecodeOptions{}, []string{"priority"}, []string{llmq.CodeInvalidValue}},
	{"priority a number", `{"priority":1,"body":` + okBody + `}`, llmq.DecodeOptions{}, []string{"priority"}, []string{llmq.CodeInvalidType}},
	{"bad deadline", `{"deadline":"tomorrow","body":` + okBody + `}`, llmq.DecodeOptions{}, []string{"deadline"}, []string{llmq.CodeInvalidValue}},
	{"deadline without zone", `{"deadline":"2026-01-01T00:00:00","body":` + okBody + `}`, llmq.DecodeOptions{}, []string{"deadline"}, []string{llmq.CodeInvalidValue}},
	{"deadline a number", `{"deadline":1767225600,"body":` + okBody + `}`, llmq.DecodeOptions{}, []string{"deadline"}, []string{llmq.CodeInvalidType}},
	{"id with spaces", `{"id":"my job","body":` + okBody + `}`, llmq.DecodeOptions{}, []string{"id"}, []string{llmq.CodeInvalidValue}},
	{"id too long", `{"id":"` + strings.Repeat("a", 129) + `","body":` + okBody + `}`, llmq.DecodeOptions{}, []string{"id"}, []string{llmq.CodeInvalidValue}},
	{"a bad tenant type does not hide a bad id", `{"id":"a b","tenant":5,"body":` + okBody + `}`, llmq.DecodeOptions{}, []string{"tenant", "id"}, []string{llmq.CodeInvalidType, llmq.CodeInvalidValue}},
	{"id non-ASCII", `{"id":"jöb","body":` + okBody + `}`, llmq.DecodeOptions{}, []string{"id"}, []string{llmq.CodeInvalidValue}},
	{"id a number", `{"id":42,"body":` + okBody + `}`, llmq.DecodeOptions{}, []string{"id"}, []string{llmq.CodeInvalidType}},
	{"tenant with slash", `{"tenant":"a/b","body":` + okBody + `}`, llmq.DecodeOptions{}, []string{"tenant"}, []string{llmq.CodeInvalidValue}},
	{"project with slash", `{"project":"a/b","body":` + okBody + `}`, llmq.DecodeOptions{}, []string{"project"}, []string{llmq.CodeInvalidValue}},
	{"project a number", `{"project":7,"body":` + okBody + `}`, llmq.DecodeOptions{}, []string{"project"}, []string{llmq.CodeInvalidType}},
	{"deferrable a string", `{"deferrable":"yes","body":` + okBody + `}`, llmq.DecodeOptions{}, []string{"deferrable"}, []string{llmq.CodeInvalidType}},
	{"fallback_models a string", `{"fallback_models":"m2","body":` + okBody + `}`, llmq.DecodeOptions{}, []string{"fallback_models"}, []string{llmq.CodeInvalidType}},
	{"fallback model empty", `{"fallback_models":["m2",""],"body":` + okBody + `}`, llmq.DecodeOptions{}, []string{"fallback_models[1]"}, []string{llmq.CodeInvalidValue}},
	{"fallback model with NUL", `{"fallback_models":["m\u0000"],"body":` + okBody + `}`, llmq.DecodeOptions{}, []string{"fallback_models[0]"}, []string{llmq.CodeInvalidValue}},
	{"fallback_models mixed types", `{"fallback_models":["m2",1],"body":` + okBody + `}`, llmq.DecodeOptions{}, []string{"fallback_models"}, []string{llmq.CodeInvalidType}},
	{"metadata not strings", `{"metadata":{"n":1},"body":` + okBody + `}`, llmq.DecodeOptions{}, []string{"metadata"}, []string{llmq.CodeInvalidType}},
	{"metadata value with NUL", `{"metadata":{"k":"a\u0000b"},"body":` + okBody + `}`, llmq.DecodeOptions{}, []string{"metadata.k"}, []string{llmq.CodeInvalidValue}},
	{"body with \\u0000", withBody(`{"model":"m","messages":[{"role":"user","content":"a\u0000"}]}`), llmq.DecodeOptions{}, []string{"body"}, []string{llmq.CodeInvalidValue}},
	{"body with lone surrogate", withBody(`{"model":"m","messages":[{"role":"user","content":"\ud800x"}]}`), llmq.DecodeOptions{}, []string{"body"}, []string{llmq.CodeInvalidValue}},
	{"body with invalid UTF-8", withBody("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}"), llmq.DecodeOptions{}, []string{"body"}, []string{llmq.CodeInvalidValue}},
	{"body with huge number", withBody(`{"model":"m","messages":[{"role":"user"}],"temperature":1e999999}`), llmq.DecodeOptions{}, []string{"body"}, []string{llmq.CodeInvalidValue}},
	{"oversized", withBody(okBody), llmq.DecodeOptions{MaxMessageBytes: 20}, []string{""}, []string{llmq.CodeTooLarge}},
	{"oversized default limit", withBody(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 1<<20) + `"}]}`), llmq.DecodeOptions{}, []string{""}, []string{llmq.CodeTooLarge}},
	{"key over the limit", `{"metadata":{"` + strings.Repeat("k", llmq.MaxKeyBytes+1) + `":"v"},"body":` + okBody + `}`, llmq.DecodeOptions{}, []string{""}, []string{llmq.CodeTooLarge}},
	{"nested too deep", withBody(`{"model":"m","messages":[{"role":"user"}],"tools":` + strings.Repeat("[", llmq.MaxDepth) + strings.Repeat("]", llmq.MaxDepth) + `}`), llmq.DecodeOptions{}, []string{""}, []string{llmq.CodeInvalidJSON}},
	{"every field wrong", `{"id":"a b","tenant":"","priority":"x","body":{"model":"","messages":[]}}`, llmq.DecodeOptions{},
		[]string{"id", "priority", "body.model", "body.messages"},
		[]string{llmq.CodeInvalidValue, llmq.CodeInvalidValue, llmq.CodeRequired, llmq.CodeInvalidValue}},
	{"type errors first", `{"id":1,"priority":2,"deadline":"x","body":{"messages":[{}]}}`, llmq.DecodeOptions{},
		[]string{"id", "priority", "deadline", "body.model", "body.messages[0].role"},
		[]string{llmq.CodeInvalidType, llmq.CodeInvalidType, llmq.CodeInvalidValue, llmq.CodeRequired, llmq.CodeRequired}},
}

func TestDecodeMalformed(t *testing.T) {
	t.Parallel()
	require.GreaterOrEqual(t, len(malformed), 25)
	for _, tc := range malformed {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j, err := llmq.Decode([]byte(tc.msg), tc.opts)
			require.Nil(t, j)
			var ve *llmq.ValidationError
			require.ErrorAs(t, err, &ve)
			require.Equal(t, tc.fields, ve.Fields())
			codes := make([]string, len(ve.Errors))
			for i, fe := range ve.Errors {
				codes[i] = fe.Code
				require.NotEmpty(t, fe.Message)
			}
			require.Equal(t, tc.codes, codes)
			require.True(t, strings.HasPrefix(err.Error(), "invalid job: "))
		})
	}
}

func TestDecodeDefaults(t *testing.T) {
	t.Parallel()
	j, err := llmq.Decode([]byte(`  {"body":`+okBody+`,"unknown":{"ignored":true}} `), llmq.DecodeOptions{})
	require.NoError(t, err)
	u, err := uuid.Parse(j.ID)
	require.NoError(t, err)
	require.Equal(t, uuid.Version(7), u.Version())
	require.Equal(t, llmq.DefaultTenant, j.Tenant)
	require.Equal(t, llmq.PriorityNormal, j.Priority)
	require.Equal(t, "gpt-4o-mini", j.Model())
	require.Equal(t, 0, j.MaxOutputTokens())
	require.Nil(t, j.Deadline)
	require.JSONEq(t, okBody, string(j.Body))

	j2, err := llmq.Decode([]byte(withBody(okBody)), llmq.DecodeOptions{})
	require.NoError(t, err)
	require.NotEqual(t, j.ID, j2.ID)
}

// TestDecodeTenantOption: DecodeOptions.Tenant is the tenant of a job that
// names none (absent or null); a named tenant, "" included (the default
// tenant's), is kept; an invalid one is refused; the job is Validated.
func TestDecodeTenantOption(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ tenant, want string }{
		{``, "acme"},
		{`"tenant":null,`, "acme"},
		{`"tenant":"",`, llmq.DefaultTenant},
		{`"tenant":"globex",`, "globex"},
	} {
		j, err := llmq.Decode([]byte(`{`+tc.tenant+`"body":`+okBody+`}`), llmq.DecodeOptions{Tenant: "acme"})
		require.NoError(t, err, tc.tenant)
		require.Equal(t, tc.want, j.Tenant, tc.tenant)
		require.True(t, j.Validated(), tc.tenant)
	}
	_, err := llmq.Decode([]byte(withBody(okBody)), llmq.DecodeOptions{Tenant: "not a tenant"})
	var ve *llmq.ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, []string{"tenant"}, ve.Fields())
}

func TestDecodeFull(t *testing.T) {
	t.Parallel()
	msg := `{"id":"job:1.a_b-c","tenant":"acme","project":"support","priority":"low","deadline":"2026-12-01T10:00:00.5+02:00",
		"deferrable":true,"fallback_models":["m2","m3"],"metadata":{"k":"v"},
		"body":{"model":"m1","messages":[{"role":"user","content":"hi"}],"max_tokens":100,"max_completion_tokens":200,"temperature":0.2}}`
	j, err := llmq.Decode([]byte(msg), llmq.DecodeOptions{})
	require.NoError(t, err)
	require.Equal(t, "job:1.a_b-c", j.ID)
	require.Equal(t, "acme", j.Tenant)
	require.Equal(t, "support", j.Project)
	require.Equal(t, llmq.PriorityLow, j.Priority)
	require.True(t, j.Deadline.Equal(time.Date(2026, 12, 1, 8, 0, 0, 5e8, time.UTC)))
	require.True(t, j.Deferrable)
	require.Equal(t, []string{"m2", "m3"}, j.FallbackModels)
	require.Equal(t, map[string]string{"k": "v"}, j.Metadata)
	require.Equal(t, "m1", j.Model())
	require.Equal(t, 200, j.MaxOutputTokens(), "max_completion_tokens wins")

	// Round trip through the wire form.
	enc, err := j.Encode()
	require.NoError(t, err)
	back, err := llmq.Decode(enc, llmq.DecodeOptions{})
	require.NoError(t, err)
	requireSameJob(t, j, back)

	// Fallback: only the model changes.
	b, err := j.WithModel("m2")
	require.NoError(t, err)
	var body map[string]any
	require.NoError(t, json.Unmarshal(b, &body))
	require.Equal(t, "m2", body["model"])
	require.Equal(t, 0.2, body["temperature"])

	// No limit.
	big := withBody(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 2<<20) + `"}]}`)
	_, err = llmq.Decode([]byte(big), llmq.DecodeOptions{MaxMessageBytes: -1})
	require.NoError(t, err)
}

func TestValidateGoJob(t *testing.T) {
	t.Parallel()
	j := &llmq.Job{Body: json.RawMessage(okBody)}
	err := j.Validate()
	var ve *llmq.ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, []string{"id", "tenant", "priority"}, ve.Fields(), "Validate applies no defaults")
	require.NoError(t, j.Normalize())
	require.NoError(t, j.Validate())
	require.Equal(t, "gpt-4o-mini", j.Model())

	j.Metadata = map[string]string{"b": "ok", "a": "bad\x00", "c": "\xff"}
	err = j.Validate()
	require.ErrorAs(t, err, &ve)
	require.Equal(t, []string{"metadata.a", "metadata.c"}, ve.Fields())
	require.False(t, errors.Is(err, errors.New("x")))
}

func TestPriority(t *testing.T) {
	t.Parallel()
	require.Equal(t, 0, llmq.PriorityHigh.Rank())
	require.Equal(t, 1, llmq.PriorityNormal.Rank())
	require.Equal(t, 2, llmq.PriorityLow.Rank())
	require.False(t, llmq.Priority("urgent").Valid())
}

func requireSameJob(t testing.TB, want, got *llmq.Job) {
	t.Helper()
	require.Equal(t, want.ID, got.ID)
	require.Equal(t, want.Tenant, got.Tenant)
	require.Equal(t, want.Project, got.Project)
	require.Equal(t, want.Priority, got.Priority)
	require.Equal(t, want.Deadline == nil, got.Deadline == nil)
	if want.Deadline != nil {
		require.True(t, want.Deadline.Equal(*got.Deadline))
	}
	require.Equal(t, want.Deferrable, got.Deferrable)
	require.Equal(t, len(want.FallbackModels), len(got.FallbackModels))
	for i := range want.FallbackModels {
		require.Equal(t, want.FallbackModels[i], got.FallbackModels[i])
	}
	require.Equal(t, len(want.Metadata), len(got.Metadata))
	for k, v := range want.Metadata {
		require.Equal(t, v, got.Metadata[k])
	}
	require.Equal(t, want.Model(), got.Model())
	require.Equal(t, want.MaxOutputTokens(), got.MaxOutputTokens())
	require.Equal(t, decodeNumbers(t, want.Body), decodeNumbers(t, got.Body))
}

// decodeNumbers decodes b keeping each number as written, so that a number
// beyond float64 (which a body may hold) compares too.
func decodeNumbers(t testing.TB, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	require.NoError(t, d.Decode(&v))
	return v
}

// BenchmarkDecode is the decoder's cost per message.
func BenchmarkDecode(b *testing.B) {
	msg := []byte(`{"id":"job-1","tenant":"acme","priority":"high","body":{"model":"gpt-4o-mini","messages":[` +
		`{"role":"system","content":"You are terse."},{"role":"user","content":"Summarise the design of a rate-limited ` +
		`LLM job queue in one paragraph."}],"max_tokens":256}}`)
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		if _, err := llmq.Decode(msg, llmq.DecodeOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestNotAnObjectSaysWhat: a message that is not a job object is named for
// what it is.
func TestNotAnObjectSaysWhat(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"not json at all": "message is not JSON: a job is one JSON object per message",
		"":                "message is empty",
		"  \n":            "message is empty",
		`["a job?"]`:      `message is JSON but not an object: a job is {"body": {...}}`,
		`42`:              `message is JSON but not an object: a job is {"body": {...}}`,
		"\xffnot json":    "message is not valid UTF-8 (byte 0)",
		"é \xffnot json":  "message is not valid UTF-8 (byte 3)",
	} {
		_, err := llmq.Decode([]byte(in), llmq.DecodeOptions{})
		var ve *llmq.ValidationError
		require.ErrorAs(t, err, &ve, "%q", in)
		require.Equal(t, []llmq.FieldError{{Field: "", Code: llmq.CodeInvalidJSON, Message: want}}, ve.Errors, "%q", in)
	}
}

// TestValidationErrorString: the error names each field before its message,
// and a message-level problem (no field) by its message alone.
func TestValidationErrorString(t *testing.T) {
	t.Parallel()
	_, err := llmq.Decode([]byte(""), llmq.DecodeOptions{})
	require.EqualError(t, err, "invalid job: message is empty")
	ve := &llmq.ValidationError{Errors: []llmq.FieldError{
		{Field: "priority", Message: "must be high, normal or low"}, {Message: "message is empty"}}}
	require.EqualError(t, ve, "invalid job: priority: must be high, normal or low; message is empty")
}

// TestValidIDBounds: 1 to 128 characters of [A-Za-z0-9._:-].
func TestValidIDBounds(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]bool{
		"": false, "a": true, strings.Repeat("a", 128): true, strings.Repeat("a", 129): false,
		"az.AZ_09:-": true, "a b": false, "a/b": false, "é": false,
	} {
		require.Equal(t, want, llmq.ValidID(id), "%q", id)
	}
}

// TestDecodeMaxTokensBounds: 1 and MaxOutputTokensLimit are both allowed.
func TestDecodeMaxTokensBounds(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, llmq.MaxOutputTokensLimit} {
		j, err := llmq.Decode([]byte(withBody(fmt.Sprintf(`{"model":"m","messages":[{"role":"user"}],"max_tokens":%d}`, n))), llmq.DecodeOptions{})
		require.NoError(t, err)
		require.Equal(t, n, j.MaxOutputTokens())
	}
}

// TestDecodeBodyPostgresCanStore: what jsonb refuses is named; a surrogate
// pair, and numbers up to the bounds, are stored as sent.
func TestDecodeBodyPostgresCanStore(t *testing.T) {
	t.Parallel()
	const unpaired = "must not contain an unpaired UTF-16 surrogate escape"
	huge := fmt.Sprintf("must not contain a number of over %d digits or with an exponent beyond ±%d", 5000, 5000)
	withContent := func(content string) string {
		return withBody(`{"model":"m","messages":[{"role":"user","content":"` + content + `"}]}`)
	}
	withNumber := func(n string) string {
		return withBody(`{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":` + n + `}`)
	}
	for msg, want := range map[string]string{
		withContent(`a\ud83d\ude00b`):         "",
		withContent(`a\\ud83d`):               "",
		withContent(`\ud83d`):                 unpaired,
		withContent(`\ud83dabcdefgh`):         unpaired,
		withContent(`\ud83d\u0041bc`):         unpaired,
		withContent(`\ud83d\ud83dxx`):         unpaired,
		withContent(`\ud83d\ue000xx`):         unpaired,
		withContent(`\udbff\udfffxx`):         "",
		withContent(`\ude00xx`):               unpaired,
		withContent(`\ud800\udc00xx`):         "",
		withContent(`\ue000xx`):               "",
		withContent(`\udbffxx`):               unpaired,
		withContent(`\udc00\udc00x`):          unpaired,
		withNumber(strings.Repeat("1", 5000)): "",
		withNumber(strings.Repeat("1", 5001)): huge,
		withNumber("1e5000"):                  "",
		withNumber("1e5001"):                  huge,
	} {
		_, err := llmq.Decode([]byte(msg), llmq.DecodeOptions{})
		if want == "" {
			require.NoError(t, err, "%.80s", msg)
			continue
		}
		var ve *llmq.ValidationError
		require.ErrorAs(t, err, &ve, "%.80s", msg)
		require.Equal(t, []llmq.FieldError{{Field: "body", Code: llmq.CodeInvalidValue, Message: want}}, ve.Errors, "%.80s", msg)
	}
}

// TestValidatedOnlyAsDecoded: a job is Validated exactly while it is as
// Decode returned it; any change since, even a byte of the body changed
// in place, and any job built in Go, must be validated again.
func TestValidatedOnlyAsDecoded(t *testing.T) {
	t.Parallel()
	msg := `{"id":"j","tenant":"acme","project":"p","priority":"low","deadline":"2026-12-01T10:00:00Z",
		"deferrable":true,"fallback_models":["m2"],"metadata":{"k":"v"},"body":` + okBody + `}`
	decode := func() *llmq.Job {
		j, err := llmq.Decode([]byte(msg), llmq.DecodeOptions{})
		require.NoError(t, err)
		return j
	}
	j := decode()
	require.True(t, j.Validated())
	j.Body = json.RawMessage(okBody)
	require.True(t, j.Validated(), "the same bytes in another slice")

	later := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	for name, change := range map[string]func(j *llmq.Job){
		"id":                 func(j *llmq.Job) { j.ID = "k" },
		"tenant":             func(j *llmq.Job) { j.Tenant = "other" },
		"project":            func(j *llmq.Job) { j.Project = "bad project" },
		"priority":           func(j *llmq.Job) { j.Priority = "urgent" },
		"deadline":           func(j *llmq.Job) { j.Deadline = &later },
		"deadline in place":  func(j *llmq.Job) { *j.Deadline = later },
		"no deadline":        func(j *llmq.Job) { j.Deadline = nil },
		"deferrable":         func(j *llmq.Job) { j.Deferrable = false },
		"fallback models":    func(j *llmq.Job) { j.FallbackModels = append(j.FallbackModels, "") },
		"fallback in place":  func(j *llmq.Job) { j.FallbackModels[0] = "" },
		"metadata in place":  func(j *llmq.Job) { j.Metadata["k"] = "\x00" },
		"body":               func(j *llmq.Job) { j.Body = json.RawMessage(`{}`) },
		"body byte in place": func(j *llmq.Job) { j.Body[len(j.Body)-2] = ' ' },
		"validated as another body, then put back": func(j *llmq.Job) {
			old := j.Body
			j.Body = json.RawMessage(`{"model":"x","messages":[{"role":"user"}],"max_tokens":5}`)
			require.NoError(t, j.Validate())
			j.Body = old
		},
	} {
		j := decode()
		change(j)
		require.False(t, j.Validated(), name)
	}
	built := &llmq.Job{ID: "j", Tenant: "acme", Priority: llmq.PriorityNormal, Body: json.RawMessage(okBody)}
	require.NoError(t, built.Validate())
	require.False(t, built.Validated(), "a job built in Go")
}

// TestShapeLimits: a job at the key and depth limits decodes and survives
// its own wire form; a job built in Go past them is refused by Validate,
// naming body.
func TestShapeLimits(t *testing.T) {
	t.Parallel()
	// The body is level 2, "tools" level 3: MaxDepth-3 more arrays inside.
	deep := strings.Repeat("[", llmq.MaxDepth-3) + strings.Repeat("]", llmq.MaxDepth-3)
	key := strings.Repeat("<", llmq.MaxKeyBytes) // escaped by Encode, still one byte each
	msg := `{"metadata":{"` + key + `":"v"},"body":{"model":"m","messages":[{"role":"user"}],"tools":[` + deep + `]}}`
	j, err := llmq.Decode([]byte(msg), llmq.DecodeOptions{})
	require.NoError(t, err)
	enc, err := j.Encode()
	require.NoError(t, err)
	_, err = llmq.Decode(enc, llmq.DecodeOptions{})
	require.NoError(t, err)

	g := &llmq.Job{ID: "g", Tenant: "t", Priority: llmq.PriorityNormal,
		Body: []byte(`{"model":"m","messages":[{"role":"user"}],"tools":[[` + deep + `]]}`)}
	var ve *llmq.ValidationError
	require.ErrorAs(t, g.Validate(), &ve)
	require.Equal(t, []string{"body"}, ve.Fields())
	require.Equal(t, llmq.CodeInvalidJSON, ve.Errors[0].Code)
	require.Contains(t, ve.Errors[0].Message, "127 level limit", "levels counted from the body")
}
