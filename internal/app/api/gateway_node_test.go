package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/app/api"
)

// nodeSDKDir holds the pinned OpenAI Node SDK (package-lock.json) and the
// script that drives it; .ci/run installs it (npm ci), and the test does
// when it is missing.
const nodeSDKDir = "testdata/openai-node"

// TestGatewayOpenAINode: the official OpenAI Node SDK (npm openai),
// pointed at llmq with its own retries off, gets a 429 with Retry-After
// when the deadline it announces cannot be met, creates a completion and
// reads x-llmq-job-id, and streams one.
func TestGatewayOpenAINode(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed")
	}
	b := gatewaySetup(t, api.GatewayConfig{})
	b.slowQueue(t, 3)
	b.slowLane(t)
	b.startWorker()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := os.Stat(filepath.Join(nodeSDKDir, "node_modules", "openai", "package.json")); err != nil {
		install := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--prefix", nodeSDKDir)
		out, err := install.CombinedOutput()
		require.NoError(t, err, "npm ci: %s", out)
	}

	cmd := exec.CommandContext(ctx, node, "gateway.mjs")
	cmd.Dir = nodeSDKDir
	cmd.Env = append(os.Environ(), "LLMQ_BASE_URL="+b.srv.URL+"/v1", "LLMQ_API_KEY="+keyAcme)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "node: %s", stderr.String())
	var got struct {
		Deadline struct {
			Status     int     `json:"status"`
			Code       string  `json:"code"`
			Type       string  `json:"type"`
			RetryAfter *string `json:"retry_after"`
		} `json:"deadline"`
		Completion struct {
			JobID            string `json:"job_id"`
			ID               string `json:"id"`
			Content          string `json:"content"`
			CompletionTokens int    `json:"completion_tokens"`
		} `json:"completion"`
		Stream struct {
			JobID        string `json:"job_id"`
			Content      string `json:"content"`
			FinishReason string `json:"finish_reason"`
			Chunks       int    `json:"chunks"`
		} `json:"stream"`
	}
	require.NoError(t, json.Unmarshal(out, &got), "%s", out)

	require.Equal(t, http.StatusTooManyRequests, got.Deadline.Status)
	require.Equal(t, api.CodeDeadlineUnmeetable, got.Deadline.Code)
	require.Equal(t, "rate_limit_error", got.Deadline.Type)
	require.NotNil(t, got.Deadline.RetryAfter)
	require.Equal(t, "140", *got.Deadline.RetryAfter)

	job := b.get(t, keyAcme, "/v1/jobs/"+got.Completion.JobID).json(t)
	require.Equal(t, "succeeded", job["status"])
	result := job["result"].(map[string]any)
	require.Equal(t, result["id"], got.Completion.ID)
	require.Equal(t, result["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"], got.Completion.Content)
	require.Equal(t, job["usage"].(map[string]any)["completion_tokens"], float64(got.Completion.CompletionTokens))

	job = b.get(t, keyAcme, "/v1/jobs/"+got.Stream.JobID).json(t)
	choice := job["result"].(map[string]any)["choices"].([]any)[0].(map[string]any)
	require.Equal(t, choice["message"].(map[string]any)["content"], got.Stream.Content)
	require.Equal(t, choice["finish_reason"], got.Stream.FinishReason)
	require.Equal(t, 2, got.Stream.Chunks, "one chunk with the message, one with the finish reason")
}
