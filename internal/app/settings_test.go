package app

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/worker"
)

// TestSettingsReachTheWorker: retry.fallback_on (every value config
// accepts) and upstream.max_response_bytes reach the worker's
// configurations.
func TestSettingsReachTheWorker(t *testing.T) {
	t.Parallel()
	s := &config.Config{Retry: config.Retry{FallbackOn: config.FallbackOnValues},
		Upstream: config.Upstream{MaxResponseBytes: 4096}}
	wc := &WorkerConfig{}
	require.Equal(t, worker.FallbackTriggers, workerConfig(s, wc).FallbackOn)
	require.EqualValues(t, 4096, upstreamConfig(s, wc).MaxResponseBytes)
	_, err := worker.New(workerConfig(s, wc))
	require.NotContains(t, err.Error(), "FallbackOn", "every value config accepts, the worker knows")
}
