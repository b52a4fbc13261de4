package worker_test

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/worker"
)

// TestDashScopeWaitHeaderAndTimeout checks that the wait header travels on
// every call and that the client timeout grows by the wait: a server that
// answers after 300 ms fails a 200 ms client, but not one with a 1 s wait.
func TestDashScopeWaitHeaderAndTimeout(t *testing.T) {
	t.Parallel()
	got := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("X-DashScope-Wait-Timeout")
		time.Sleep(300 * time.Millisecond) // the slow upstream under test, not a wait for correctness
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(openai.ChatCompletionResponse{ID: "chatcmpl-1", Object: "chat.completion"})
	}))
	t.Cleanup(srv.Close)
	req := openai.ChatCompletionRequest{Model: "qwen-plus", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "hi"}}}

	plain := worker.NewOpenAIClient(worker.UpstreamConfig{BaseURL: srv.URL + "/v1", APIKey: "k", Timeout: 200 * time.Millisecond})
	_, err := plain.CreateChatCompletion(context.Background(), req)
	require.Error(t, err, "300 ms answer, 200 ms timeout")
	require.Equal(t, "", <-got)

	waiting := worker.NewOpenAIClient(worker.UpstreamConfig{BaseURL: srv.URL + "/v1", APIKey: "k",
		Timeout: 200 * time.Millisecond, DashScopeWaitTimeout: time.Second})
	resp, err := waiting.CreateChatCompletion(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, "chatcmpl-1", resp.ID)
	require.Equal(t, "1", <-got)
}

// TestBodyPassesThroughAndRawResultIsStored checks DESIGN's contract: the
// job's body reaches the upstream unchanged (fields go-openai does not know
// included), and the stored result is the upstream's JSON as it came.
func TestBodyPassesThroughAndRawResultIsStored(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 12})
	seen := make(chan map[string]any, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		seen <- body
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"chatcmpl-raw","object":"chat.completion","created":1,"model":"m",` +
			`"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop","logprobs":null}],` +
			`"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4},"x_vendor":{"region":"eu"}}`))
	}))
	t.Cleanup(srv.Close)
	tb.start(t, func(c *worker.Config) {
		c.Upstream = upstreamAt(srv.URL+"/v1", 5*time.Second)
	})
	tb.publish(t, []byte(`{"id":"pt-1","body":{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":5,"x_param":{"keep":true}}}`))
	rec := tb.waitTerminal(t, []string{"pt-1"}, 20*time.Second)["pt-1"]
	require.Equal(t, llmq.StatusSucceeded, rec.Status)
	body := <-seen
	require.Equal(t, map[string]any{"keep": true}, body["x_param"], "unknown request fields pass through")
	require.Equal(t, "m", body["model"])
	var stored map[string]any
	require.NoError(t, json.Unmarshal(rec.Result, &stored))
	require.Equal(t, map[string]any{"region": "eu"}, stored["x_vendor"], "unknown response fields are kept")
	require.Equal(t, 3, rec.PromptTokens)
}

// TestOpenAIUpstreamCall sends one request through OpenAIUpstream to the
// simulator per case and checks the classified reply.
func TestOpenAIUpstreamCall(t *testing.T) {
	t.Parallel()
	faults := func(kind upstreamsim.FaultKind) upstreamsim.FaultConfig {
		return upstreamsim.FaultConfig{Rates: map[upstreamsim.FaultKind]float64{kind: 1}}
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name     string
		sim      upstreamsim.Config
		provider worker.Provider
		ctx      context.Context
		class    worker.Class
		status   int
		code     string
		// retryAfter is the Retry-After the reply's headers carry.
		retryAfter time.Duration
	}{
		{name: "success", class: worker.ClassSuccess, status: 200},
		{name: "slow_down 429 with Retry-After", sim: upstreamsim.Config{Faults: faults(upstreamsim.FaultSlowDown)},
			class: worker.ClassRateLimited, status: 429, code: "slow_down", retryAfter: time.Second},
		{name: "insufficient_quota is billing on OpenAI", sim: upstreamsim.Config{Faults: faults(upstreamsim.FaultInsufficientQuota)},
			class: worker.ClassPermanent, status: 429, code: "insufficient_quota"},
		{name: "insufficient_quota is TPM on DashScope", sim: upstreamsim.Config{Faults: faults(upstreamsim.FaultInsufficientQuota)},
			provider: worker.ProviderDashScope, class: worker.ClassRateLimited, status: 429, code: "insufficient_quota"},
		{name: "500", sim: upstreamsim.Config{Faults: faults(upstreamsim.FaultServerError)},
			class: worker.ClassRetryable, status: 500, code: "server_error"},
		{name: "502 html page", sim: upstreamsim.Config{Faults: faults(upstreamsim.FaultBadGateway)},
			class: worker.ClassRetryable, status: 502, code: "http_502"},
		{name: "connection reset", sim: upstreamsim.Config{Faults: faults(upstreamsim.FaultConnectionReset)},
			class: worker.ClassRetryable, code: "connection_error"},
		{name: "cancelled", ctx: cancelled, class: worker.ClassRetryable, code: "cancelled"},
	}
	body := []byte(`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sim := upstreamsim.NewTestServer(t, tt.sim)
			up := worker.OpenAIUpstream(worker.NewOpenAIClient(worker.UpstreamConfig{BaseURL: sim.URL, APIKey: "k", Timeout: 5 * time.Second}),
				cmp.Or(tt.provider, worker.ProviderOpenAI))
			r := up.Call(cmp.Or(tt.ctx, context.Background()), "m", body)
			require.Equal(t, tt.class, r.Outcome.Class, "%s: %v", r.Outcome.Class, r.Outcome.Err)
			require.Equal(t, tt.status, r.Outcome.Status)
			require.Equal(t, tt.code, r.Outcome.Code)
			require.Equal(t, tt.retryAfter, r.Outcome.Headers.RetryAfter)
			if tt.class != worker.ClassSuccess {
				require.Nil(t, r.Body)
				require.Zero(t, r.PromptTokens+r.CompletionTokens)
				return
			}
			var got struct {
				Object string `json:"object"`
				Usage  struct {
					PromptTokens     int `json:"prompt_tokens"`
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			require.NoError(t, json.Unmarshal(r.Body, &got), "the body is the upstream's JSON")
			require.Equal(t, "chat.completion", got.Object)
			require.Equal(t, got.Usage.PromptTokens, r.PromptTokens)
			require.Equal(t, got.Usage.CompletionTokens, r.CompletionTokens)
			require.Positive(t, r.PromptTokens)
			require.EqualValues(t, 1, sim.Sim.Stats().Total.Succeeded)
		})
	}
}
