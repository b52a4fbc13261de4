package worker_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/worker"
)

// A body that names a key twice is sent as llmq read it: with one "model",
// the one the catalog allowed, and one max_tokens, the one estimated, not
// as the producer wrote it, which a provider that keeps the first of two
// keys would read as another model and another budget. The worker sends
// the body as Postgres returns it (jsonb keeps the last of two keys, as
// Go's decoding does), so a change of the column's type or of what the
// worker sends shows here.
func TestCallSendsTheBodyAsValidated(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 53})
	sim, err := url.Parse(tb.sim.URL)
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(sim)
	var (
		mu   sync.Mutex
		sent [][]byte
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		mu.Lock()
		sent = append(sent, body)
		mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	tb.start(t, func(c *worker.Config) {
		c.Upstream = upstreamAt(srv.URL, 30*time.Second)
		c.Catalog = llmq.Catalog{Models: map[string]llmq.Model{"gpt-4o-mini": {}}}
	})
	tb.publish(t, []byte(`{"id":"twice","body":{"model":"not-allowed","model":"gpt-4o-mini","max_tokens":100000,"max_tokens":32,`+
		`"messages":[{"role":"user","content":"hello"}]}}`))
	require.Equal(t, llmq.StatusSucceeded, tb.waitTerminal(t, []string{"twice"}, 20*time.Second)["twice"].Status)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, sent, 1)
	require.Equal(t, 1, bytes.Count(sent[0], []byte(`"model"`)), "%s", sent[0])
	require.Equal(t, 1, bytes.Count(sent[0], []byte(`"max_tokens"`)), "%s", sent[0])
	var got struct {
		Model     string `json:"model"`
		MaxTokens int    `json:"max_tokens"`
	}
	require.NoError(t, json.Unmarshal(sent[0], &got))
	require.Equal(t, "gpt-4o-mini", got.Model)
	require.Equal(t, 32, got.MaxTokens)
}
