package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/app/api"
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
