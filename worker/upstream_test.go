package worker_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"

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
