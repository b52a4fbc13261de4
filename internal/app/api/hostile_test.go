package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/store"
)

// syncBuffer is a log sink written by the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestInvalidBytesInPathAndQuery: invalid UTF-8 or NUL in a path or a
// query (a forged cursor included) answers 400 or 404, never 500, and
// logs no error.
func TestInvalidBytesInPathAndQuery(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	b := setup(t, options{api: func(c *api.Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}})
	require.Equal(t, http.StatusAccepted, b.post(t, keyAcme, jobJSON("j1")).status)
	forged := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, tc := range []struct {
		method, path string
		status       int
		field        string
	}{
		{"GET", "/v1/jobs/%FF", 404, "id"},
		{"GET", "/v1/jobs/a%00b", 404, "id"},
		{"DELETE", "/v1/jobs/%C3%28", 404, "id"},
		{"GET", "/v1/jobs/" + strings.Repeat("x", 4000), 404, "id"},
		{"GET", "/v1/jobs?status=a%00", 400, "status"},
		{"GET", "/v1/jobs?after=" + forged("1700000000000000:\x00"), 400, "after"},
		{"GET", "/v1/jobs?after=" + forged("1700000000000000:\xff\xfe"), 400, "after"},
		{"GET", "/v1/jobs?after=" + forged("1700000000000000:"+strings.Repeat("a", 300)), 400, "after"},
		{"GET", "/v1/jobs?after=%FF", 400, "after"},
		{"GET", "/v1/dead-letters?reason=a%00", 400, "reason"},
		{"GET", "/v1/dead-letters?job_id=%FF", 400, "job_id"},
		{"GET", "/v1/dead-letters/%FF", 404, "id"},
		{"POST", "/v1/dead-letters/1%00/replay", 404, "id"},
	} {
		r := b.do(t, tc.method, tc.path, keyAcme, "", nil)
		require.Equal(t, tc.status, r.status, "%s %s: %s", tc.method, tc.path, r.body)
		require.Equal(t, tc.field, r.apiError(t).Field, "%s %s", tc.method, tc.path)
	}
	require.NotContains(t, logs.String(), "level=ERROR", logs.String())
}

// TestKeptSound holds what the security review found sound: keys looked up
// by their hash (the API keeps none), fail-closed without keys, tenants
// filtered in the database, values passed as parameters, and log lines
// that a request cannot forge.
func TestKeptSound(t *testing.T) {
	t.Parallel()

	// No keys: every /v1 request is refused, whatever it carries.
	closed := setup(t, options{api: func(c *api.Config) { c.Keys = nil }})
	for _, key := range []string{keyAcme, "", "anything"} {
		require.Equal(t, http.StatusUnauthorized, closed.post(t, key, jobJSON("x")).status)
		require.Equal(t, http.StatusUnauthorized, closed.get(t, key, "/v1/jobs").status)
		require.Equal(t, http.StatusUnauthorized, closed.get(t, key, "/v1/dead-letters").status)
	}

	// Values that would break SQL built by concatenation are stored as
	// they are, and the table is intact.
	b := setup(t, options{})
	inj := `'); DROP TABLE jobs; --`
	r := b.post(t, keyAcme, `{"id":"sql-1","metadata":{"k":"`+inj+`"},"body":{"model":"m' OR '1'='1","messages":[{"role":"user","content":"`+inj+`"}]}}`)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	job := b.get(t, keyAcme, "/v1/jobs/sql-1").json(t)
	require.Equal(t, map[string]any{"k": inj}, job["metadata"])
	require.Equal(t, "m' OR '1'='1", job["model"])
	// Another tenant sees none of it, by id or by list.
	require.Equal(t, http.StatusNotFound, b.get(t, keyGlobex, "/v1/jobs/sql-1").status)
	require.Equal(t, []any{}, b.get(t, keyGlobex, "/v1/jobs?limit=1000").json(t)["data"])
	var n int
	require.NoError(t, b.store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM jobs`).Scan(&n))
	require.Equal(t, 1, n)

	// A failing request logs one line (slog quotes every value), without
	// a connection string; what a client sends in a query never reaches
	// the log, and a path reaches it only once it passed the id check.
	var logs syncBuffer
	down := setup(t, options{api: func(c *api.Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) }})
	down.store.Pool().Close()
	r = down.get(t, keyAcme, "/v1/jobs?status=queued%0Alevel=ERROR%20msg=forged")
	require.Equal(t, http.StatusBadRequest, r.status)
	r = down.get(t, keyAcme, "/v1/jobs/x%0Alevel=ERROR%20msg=forged")
	require.Equal(t, http.StatusNotFound, r.status)
	r = down.get(t, keyAcme, "/v1/jobs/x")
	require.Equal(t, http.StatusInternalServerError, r.status)
	require.Equal(t, 1, strings.Count(logs.String(), "\n"), logs.String())
	require.NotContains(t, logs.String(), "forged")
	require.NotContains(t, logs.String(), "postgres://", "no connection string in a log line")
}

// countingReader counts the bytes read of r.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n += int64(k)
	return k, err
}

// TestHostileBodies: 16 MiB bodies of one key, a long array, deep nesting
// and one long string are refused, naming the limit, after reading little
// more than that limit of the body, on POST /v1/jobs and on the gateway.
func TestHostileBodies(t *testing.T) {
	t.Parallel()
	b := setup(t, options{api: func(c *api.Config) { c.JobsDone = c.Store.(*store.Jobs) }})
	const size = api.MaxBodyBytesDefault
	fill := func(prefix, unit, suffix string) []byte {
		n := (size - len(prefix) - len(suffix)) / len(unit)
		return []byte(prefix + strings.Repeat(unit, n) + suffix)
	}
	nested := func(prefix, suffix string) []byte {
		n := (size - len(prefix) - len(suffix)) / 2
		return []byte(prefix + strings.Repeat("[", n) + strings.Repeat("]", n) + suffix)
	}
	const (
		key    = "a JSON object key is over the 1024 byte limit (at byte 1026)"
		deep   = "JSON nests deeper than the 130 level limit"
		str    = "a JSON string is over the 1048576 byte limit"
		oneJob = "the job is over the 1048576 byte limit of a job"
	)
	for _, tc := range []struct {
		name, path string
		body       []byte
		status     int
		code, msg  string
	}{
		{"job key", "/v1/jobs", fill(`{"`, "a", `":0}`), 400, "too_large", key},
		{"job array", "/v1/jobs", fill(`{"body":{"model":"m","messages":[0`, ",0", `]}}`), 400, "too_large", oneJob},
		{"job nested arrays", "/v1/jobs", nested(`{"body":{"model":"m","messages":`, `}}`), 400, "invalid_json", deep},
		{"job long string", "/v1/jobs", fill(`{"body":{"model":"m","messages":[{"role":"user","content":"`, "a", `"}]}}`), 400, "too_large", str},
		{"batch key", "/v1/jobs", fill(`{"jobs":[{"`, "a", `":0}]}`), 400, "too_large", "a JSON object key is over the 1024 byte limit (at byte 1035)"},
		{"call key", "/v1/chat/completions", fill(`{"`, "a", `":0}`), 400, "too_large", key},
		{"call array", "/v1/chat/completions", fill(`{"model":"m","messages":[0`, ",0", `]}`), 413, "too_large", "request body is over the 1114112 byte limit of a gateway call"},
		{"call nested arrays", "/v1/chat/completions", nested(`{"model":"m","messages":`, `}`), 400, "invalid_json", deep},
		{"call long string", "/v1/chat/completions", fill(`{"model":"m","messages":[{"role":"user","content":"`, "a", `"}]}`), 400, "too_large", str},
	} {
		require.LessOrEqual(t, len(tc.body), size, tc.name)
		body := &countingReader{r: bytes.NewReader(tc.body)}
		req := httptest.NewRequest(http.MethodPost, tc.path, body)
		req.Header.Set("Authorization", "Bearer "+keyAcme)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		b.api.ServeHTTP(rec, req)
		require.Equal(t, tc.status, rec.Code, "%s: %s", tc.name, rec.Body)
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e), tc.name)
		require.Equal(t, tc.code, e.Error.Code, "%s: %s", tc.name, rec.Body)
		require.True(t, strings.HasPrefix(e.Error.Message, tc.msg), "%s: %s", tc.name, e.Error.Message)
		require.Less(t, body.n, int64(2<<20), "%s: read %d bytes of the body", tc.name, body.n)
	}
	require.Equal(t, int64(0), b.broker.Depth("jobs"), "nothing published")
}
