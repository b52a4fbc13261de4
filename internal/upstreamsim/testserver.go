package upstreamsim

import (
	"context"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// TestServer is a Server listening on a random loopback port for the
// duration of a test.
type TestServer struct {
	// URL is the OpenAI base URL, ending in /v1 (for ClientConfig.BaseURL).
	URL string
	// Root is the server root, e.g. http://127.0.0.1:41234 (for /sim/stats).
	Root string
	// Sim is the simulator.
	Sim *Server
}

// NewTestServer starts a simulator with cfg on 127.0.0.1:0 and stops it in
// t.Cleanup. It fails the test on error.
func NewTestServer(t testing.TB, cfg Config, opts ...Option) *TestServer {
	t.Helper()
	sim, err := New(cfg, opts...)
	if err != nil {
		t.Fatalf("upstreamsim.New: %v", err)
	}
	root, err := sim.Start(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatalf("upstreamsim.Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := sim.Stop(ctx); err != nil {
			t.Errorf("upstreamsim.Stop: %v", err)
		}
	})
	return &TestServer{URL: root + "/v1", Root: root, Sim: sim}
}

// ClientConfig returns a go-openai configuration for this server with the
// given API key.
func (ts *TestServer) ClientConfig(apiKey string) openai.ClientConfig {
	c := openai.DefaultConfig(apiKey)
	c.BaseURL = ts.URL
	return c
}

// Client returns a go-openai client for this server with the given API key.
func (ts *TestServer) Client(apiKey string) *openai.Client {
	return openai.NewClientWithConfig(ts.ClientConfig(apiKey))
}
