package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/upstreamsim"
)

// TestSimPrintsItsLimits: the banner shows the limits the simulator
// enforces, the configuration file's included, not the flags' defaults.
func TestSimPrintsItsLimits(t *testing.T) {
	t.Parallel()
	sim, err := upstreamsim.New(upstreamsim.Config{
		Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: 100, TPM: -1}},
		Models: map[string]upstreamsim.ModelConfig{
			"gpt-4o-mini":  {Limits: upstreamsim.Limits{RPM: 600, TPM: 150000, MaxConcurrency: 8}},
			"gpt-4.1-mini": {Limits: upstreamsim.Limits{TPM: 20000}},
		},
	})
	require.NoError(t, err)
	var out bytes.Buffer
	printSimLimits(&out, "http://127.0.0.1:8081", sim)
	require.Equal(t, `llmq sim: OPENAI_BASE_URL=http://127.0.0.1:8081/v1 mode=openai enforcement=minute rate-limit-headers=all seed=0
  model gpt-4.1-mini: rpm=100 tpm=20000 concurrency=unlimited
  model gpt-4o-mini: rpm=600 tpm=150000 concurrency=8
  any other model: rpm=100 tpm=unlimited concurrency=unlimited (set restrict_models to refuse unknown names)
`, out.String())

	sim, err = upstreamsim.New(upstreamsim.Config{RestrictModels: true,
		Models: map[string]upstreamsim.ModelConfig{"m": {}}})
	require.NoError(t, err)
	out.Reset()
	printSimLimits(&out, "http://h", sim)
	require.Contains(t, out.String(), "  model m: rpm=500 tpm=200000 concurrency=unlimited\n  any other model: 404 model_not_found (restrict_models)\n")
}
