package upstreamsim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseConfig(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig([]byte(`
mode: dashscope
seed: 42
default: {rpm: 600, tpm: 200000, concurrency: 64}
models:
  gpt-4o: {rpm: 100, tpm: 30000, context_window: 8192, price: {input_per_mtok: 2.5, output_per_mtok: 10}}
  qwen-plus: {burst_growth: 2, burst_floor: 5}
latency: {ttft: 300ms, per_token: 20ms, capacity: 32, congestion_factor: 2}
output: {distribution: lognormal, min: 8, max: 1024, mean: 200, stddev: 100}
faults:
  rates: {server_error: 0.01, overloaded: 0.005, hang: 0.001}
  hang_duration: 2m
batch: {time_scale: 1000, lines_per_second: 200, completion_window: 24h}
schedule:
  - {at: 30s, model: gpt-4o, limits: {rpm: 50, tpm: 10000}}
enforcement: short
short_bucket: 2s
rate_limit_headers: none
`))
	require.NoError(t, err)
	require.Equal(t, ModeDashScope, c.Mode)
	require.Equal(t, uint64(42), c.Seed)
	require.Equal(t, Limits{RPM: 600, TPM: 200000, MaxConcurrency: 64}, c.Default.Limits)
	require.Equal(t, 8192, c.Models["gpt-4o"].ContextWindow)
	require.Equal(t, 2.5, c.Models["gpt-4o"].Price.InputPerMTok)
	require.Equal(t, 2.0, c.Models["qwen-plus"].BurstGrowth)
	require.Equal(t, 300*time.Millisecond, c.Latency.TTFT)
	require.Equal(t, 0.01, c.Faults.Rates[FaultServerError])
	require.Equal(t, 2*time.Minute, c.Faults.HangDuration)
	require.Equal(t, 1000.0, c.Batch.TimeScale)
	require.Equal(t, []ScheduleEntry{{At: 30 * time.Second, Model: "gpt-4o", Limits: Limits{RPM: 50, TPM: 10000}}}, c.Schedule)
	require.Equal(t, []any{EnforcementShort, 2 * time.Second, HeadersNone}, []any{c.Enforcement, c.ShortBucket, c.RateLimitHeaders})

	d := c.WithDefaults()
	require.Equal(t, int64(600), d.Models["qwen-plus"].RPM, "model entries inherit the default")
	require.Equal(t, 64, d.Models["gpt-4o"].MaxConcurrency)

	_, err = ParseConfig([]byte("rmp: 5\n"))
	require.ErrorIs(t, err, ErrInvalidConfig)
	// A misspelt key is named by its path, with the keys that exist (no Go
	// type), on its own line.
	_, err = ParseConfig([]byte("restrict_models: true\nmodels:\n  gpt-4o-mini: {rpn: 600}\n"))
	require.ErrorContains(t, err, `line 3: models.gpt-4o-mini: unknown key "rpn"; want one of `)
	require.ErrorContains(t, err, ", rpm, ")
	require.NotContains(t, err.Error(), "ModelConfig")
	_, err = ParseConfig([]byte("default: {rpm: -7}\n"))
	require.ErrorContains(t, err, "default.rpm")
	c, err = ParseConfig(nil)
	require.NoError(t, err)
	require.Equal(t, Config{}, c)
}
