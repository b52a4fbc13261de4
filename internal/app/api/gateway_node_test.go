package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/shaping"
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

// TestGatewayOpenAINodeWorkload: agents on the official Node SDK, with no
// llmq header, at ten times the rates of a small provider account (600
// RPM, 200k TPM, 4 calls at a time, 3% 502s and 2% connection resets),
// from a cold start, the SDK's timeout a tenth of its default (60 s):
// with the model's quota configured or learned from the provider's
// headers, and the SDK's retries off or at its default, no call fails
// and the provider refuses at most 1% of them.
func TestGatewayOpenAINodeWorkload(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	const agents, calls = 11, 10
	for _, arm := range []struct {
		name       string
		quotas     bool
		maxRetries string // "": the SDK's default
	}{
		{"learned/retries-0", false, "0"},
		{"learned/retries-default", false, ""},
		{"configured/retries-0", true, "0"},
		{"configured/retries-default", true, ""},
	} {
		t.Run(arm.name, func(t *testing.T) {
			t.Parallel()
			env := gatewayEnv{sim: upstreamsim.Config{Seed: 3, RestrictModels: true, APIKeys: []string{"sk-test"},
				Models: map[string]upstreamsim.ModelConfig{"gpt-4o-mini": {Limits: upstreamsim.Limits{RPM: 600, TPM: 200_000, MaxConcurrency: 4}}},
				Faults: upstreamsim.FaultConfig{Rates: map[upstreamsim.FaultKind]float64{
					upstreamsim.FaultBadGateway: 0.03, upstreamsim.FaultConnectionReset: 0.02}}}}
			// The strategies llmq picks by default: shape for a model
			// with a quota, adaptive for one without.
			env.strategy = shaping.StrategyAdaptive
			if arm.quotas {
				env.strategy = shaping.StrategyShape
				env.catalog = llmq.Catalog{Models: map[string]llmq.Model{"gpt-4o-mini": {RPM: 600, TPM: 200_000, Concurrency: 4}, "gpt-4o": {}}}
			}
			b := gatewaySetupEnv(t, api.GatewayConfig{}, env)
			b.startWorker()
			installNodeSDK(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, "workload.mjs")
			cmd.Dir = nodeSDKDir
			cmd.Env = append(os.Environ(), "LLMQ_BASE_URL="+b.srv.URL+"/v1", "LLMQ_API_KEY="+keyAcme,
				"AGENTS="+strconv.Itoa(agents), "CALLS="+strconv.Itoa(calls), "TIMEOUT_MS=60000")
			if arm.maxRetries != "" {
				cmd.Env = append(cmd.Env, "MAX_RETRIES="+arm.maxRetries)
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			require.NoError(t, err, "node: %s", stderr.String())
			var got struct {
				OK, Failed int
				Errors     map[string]int
			}
			require.NoError(t, json.Unmarshal(out, &got), "%s", out)
			require.Equal(t, agents*calls, got.OK, "failures: %v", got.Errors)
			var refused int64
			for _, n := range b.sim.Sim.Stats().Total.RateLimited {
				refused += n
			}
			t.Logf("%d calls, provider 429s %d", got.OK, refused)
			require.LessOrEqual(t, refused, int64(agents*calls/100), "the provider's 429s")
		})
	}
}

// installNodeSDK runs npm ci in nodeSDKDir unless the SDK is there.
func installNodeSDK(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(nodeSDKDir, "node_modules", "openai", "package.json")); err == nil {
		return
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed")
	}
	out, err := exec.Command(npm, "ci", "--no-audit", "--no-fund", "--prefix", nodeSDKDir).CombinedOutput()
	require.NoError(t, err, "npm ci: %s", out)
}
