package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/app/api"
)

// TestMalformedRequests sends bad requests and checks the exact status,
// error code and field of each; none of them records or publishes a job.
func TestMalformedRequests(t *testing.T) {
	t.Parallel()
	b := setup(t, options{api: func(c *api.Config) { c.MaxBodyBytes = 64 << 10; c.MaxMessageBytes = 8 << 10 }})
	const json = "application/json"
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	body := func(s string) string { return `{"body":` + s + `}` }
	withBody := func(fields string) string { return `{` + fields + `,"body":` + validBody + `}` }
	big := `{"body":{"model":"m",` + msgs + `,"pad":"` + strings.Repeat("x", 9<<10) + `"}}`
	huge := strings.Repeat(" ", 65<<10) + jobJSON("")
	tooMany := `{"jobs":[` + strings.TrimSuffix(strings.Repeat(`{},`, api.MaxBatch+1), ",") + `]}`

	cases := []struct {
		name, method, path, ctype, body string
		status                          int
		code, field                     string
	}{
		{"empty body", "POST", "/v1/jobs", json, ``, 400, "invalid_json", ""},
		{"whitespace body", "POST", "/v1/jobs", json, "  \n", 400, "invalid_json", ""},
		{"array body", "POST", "/v1/jobs", json, `[` + jobJSON("") + `]`, 400, "invalid_json", ""},
		{"string body", "POST", "/v1/jobs", json, `"job"`, 400, "invalid_json", ""},
		{"truncated JSON", "POST", "/v1/jobs", json, `{"body":{"model":"m"`, 400, "invalid_json", ""},
		{"trailing garbage", "POST", "/v1/jobs", json, jobJSON("") + `x`, 400, "invalid_json", ""},
		{"no body field", "POST", "/v1/jobs", json, `{"id":"a"}`, 400, "required", "body"},
		{"body null", "POST", "/v1/jobs", json, `{"body":null}`, 400, "required", "body"},
		{"body is a string", "POST", "/v1/jobs", json, body(`"hi"`), 400, "invalid_type", "body"},
		{"body is an array", "POST", "/v1/jobs", json, body(`[1]`), 400, "invalid_type", "body"},
		{"model missing", "POST", "/v1/jobs", json, body(`{` + msgs + `}`), 400, "required", "body.model"},
		{"model empty", "POST", "/v1/jobs", json, body(`{"model":" ",` + msgs + `}`), 400, "required", "body.model"},
		{"model a number", "POST", "/v1/jobs", json, body(`{"model":4,` + msgs + `}`), 400, "invalid_type", "body.model"},
		{"messages missing", "POST", "/v1/jobs", json, body(`{"model":"m"}`), 400, "required", "body.messages"},
		{"messages empty", "POST", "/v1/jobs", json, body(`{"model":"m","messages":[]}`), 400, "invalid_value", "body.messages"},
		{"messages an object", "POST", "/v1/jobs", json, body(`{"model":"m","messages":{}}`), 400, "invalid_type", "body.messages"},
		{"message not an object", "POST", "/v1/jobs", json, body(`{"model":"m","messages":["hi"]}`), 400, "invalid_type", "body.messages[0]"},
		{"message without role", "POST", "/v1/jobs", json, body(`{"model":"m","messages":[{"role":"user","content":"a"},{"content":"b"}]}`), 400, "required", "body.messages[1].role"},
		{"max_tokens negative", "POST", "/v1/jobs", json, body(`{"model":"m",` + msgs + `,"max_tokens":-1}`), 400, "invalid_value", "body.max_tokens"},
		{"max_tokens a string", "POST", "/v1/jobs", json, body(`{"model":"m",` + msgs + `,"max_tokens":"10"}`), 400, "invalid_type", "body.max_tokens"},
		{"id invalid chars", "POST", "/v1/jobs", json, withBody(`"id":"a b"`), 400, "invalid_value", "id"},
		{"id too long", "POST", "/v1/jobs", json, withBody(`"id":"` + strings.Repeat("a", 129) + `"`), 400, "invalid_value", "id"},
		{"id a number", "POST", "/v1/jobs", json, withBody(`"id":5`), 400, "invalid_type", "id"},
		{"tenant a number", "POST", "/v1/jobs", json, withBody(`"tenant":5`), 400, "invalid_type", "tenant"},
		{"tenant of another", "POST", "/v1/jobs", json, withBody(`"tenant":"globex"`), 400, "tenant_mismatch", "tenant"},
		{"priority unknown", "POST", "/v1/jobs", json, withBody(`"priority":"urgent"`), 400, "invalid_value", "priority"},
		{"priority a number", "POST", "/v1/jobs", json, withBody(`"priority":1`), 400, "invalid_type", "priority"},
		{"deadline not RFC 3339", "POST", "/v1/jobs", json, withBody(`"deadline":"tomorrow"`), 400, "invalid_value", "deadline"},
		{"deadline a number", "POST", "/v1/jobs", json, withBody(`"deadline":1700000000`), 400, "invalid_type", "deadline"},
		{"deadline passed", "POST", "/v1/jobs", json, withBody(`"deadline":"2020-01-01T00:00:00Z"`), 400, "invalid_value", "deadline"},
		{"deferrable a string", "POST", "/v1/jobs", json, withBody(`"deferrable":"yes"`), 400, "invalid_type", "deferrable"},
		{"fallback_models a string", "POST", "/v1/jobs", json, withBody(`"fallback_models":"gpt-4o"`), 400, "invalid_type", "fallback_models"},
		{"fallback model empty", "POST", "/v1/jobs", json, withBody(`"fallback_models":["a",""]`), 400, "invalid_value", "fallback_models[1]"},
		{"metadata not strings", "POST", "/v1/jobs", json, withBody(`"metadata":{"k":1}`), 400, "invalid_type", "metadata"},
		{"job over the message limit", "POST", "/v1/jobs", json, big, 400, "too_large", ""},
		{"jobs not an array", "POST", "/v1/jobs", json, `{"jobs":{}}`, 400, "invalid_type", "jobs"},
		{"jobs null", "POST", "/v1/jobs", json, `{"jobs":null}`, 400, "invalid_type", "jobs"},
		{"jobs empty", "POST", "/v1/jobs", json, `{"jobs":[]}`, 400, "invalid_value", "jobs"},
		{"jobs over 1000", "POST", "/v1/jobs", json, tooMany, 400, "too_many_jobs", "jobs"},
		{"batch job not an object", "POST", "/v1/jobs", json, `{"jobs":[` + jobJSON("") + `,3]}`, 400, "invalid_json", "jobs[1]"},
		{"batch job bad field", "POST", "/v1/jobs", json, `{"jobs":[` + jobJSON("") + `,` + jobJSON("") + `,` + body(`{"model":"m"}`) + `]}`, 400, "required", "jobs[2].body.messages"},
		{"batch job other tenant", "POST", "/v1/jobs", json, `{"jobs":[` + withBody(`"tenant":"globex"`) + `]}`, 400, "tenant_mismatch", "jobs[0].tenant"},
		{"batch job passed deadline", "POST", "/v1/jobs", json, `{"jobs":[` + withBody(`"deadline":"2001-01-01T00:00:00Z"`) + `]}`, 400, "invalid_value", "jobs[0].deadline"},
		{"body over the request limit", "POST", "/v1/jobs", json, huge, 413, "too_large", ""},
		{"no content type", "POST", "/v1/jobs", "", jobJSON(""), 415, "unsupported_media_type", ""},
		{"text/plain", "POST", "/v1/jobs", "text/plain", jobJSON(""), 415, "unsupported_media_type", ""},
		{"form", "POST", "/v1/jobs", "application/x-www-form-urlencoded", "a=b", 415, "unsupported_media_type", ""},
		{"json with charset is fine but bad", "POST", "/v1/jobs", "application/json; charset=utf-8", `{}`, 400, "required", "body"},
		{"list bad status", "GET", "/v1/jobs?status=done", "", "", 400, "invalid_value", "status"},
		{"list limit zero", "GET", "/v1/jobs?limit=0", "", "", 400, "invalid_value", "limit"},
		{"list limit too big", "GET", "/v1/jobs?limit=1001", "", "", 400, "invalid_value", "limit"},
		{"list limit not a number", "GET", "/v1/jobs?limit=ten", "", "", 400, "invalid_value", "limit"},
		{"list bad cursor", "GET", "/v1/jobs?after=%21%21", "", "", 400, "invalid_value", "after"},
		{"list forged cursor", "GET", "/v1/jobs?after=bm9wZQ", "", "", 400, "invalid_value", "after"},
		{"get missing job", "GET", "/v1/jobs/nope", "", "", 404, "not_found", "id"},
		{"cancel missing job", "DELETE", "/v1/jobs/nope", "", "", 404, "not_found", "id"},
		{"unknown path", "GET", "/v1/nothing", "", "", 404, "not_found", ""},
		{"PUT a job", "PUT", "/v1/jobs/x", json, jobJSON(""), 405, "method_not_allowed", ""},
		{"DELETE the collection", "DELETE", "/v1/jobs", "", "", 405, "method_not_allowed", ""},
		{"POST the queue", "POST", "/v1/queue", json, `{}`, 405, "method_not_allowed", ""},
	}
	require.GreaterOrEqual(t, len(cases), 40)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := b.do(t, tc.method, tc.path, keyAcme, tc.ctype, []byte(tc.body))
			require.Equal(t, tc.status, r.status, "%s", r.body)
			require.Equal(t, "application/json", r.header.Get("Content-Type"))
			e := r.apiError(t)
			require.Equal(t, tc.code, e.Code, "%s", r.body)
			require.Equal(t, tc.field, e.Field, "%s", r.body)
			require.NotEmpty(t, e.Message)
			if tc.status == http.StatusMethodNotAllowed {
				require.NotEmpty(t, r.header.Get("Allow"))
			}
		})
	}
	require.Equal(t, int64(0), b.broker.Depth("jobs"), "no bad request published anything")
	list := b.get(t, keyAcme, "/v1/jobs").json(t)
	require.Equal(t, []any{}, list["data"], "no bad request recorded anything")
}
