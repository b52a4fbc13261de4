package app_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/app"
	"github.com/llmq/llmq/internal/config"
)

// TestCheckNamesTheSetting checks the settings whose grammar or bounds
// belong to a component: zero (the component's default) passes, each bad
// value is reported with the setting's name.
func TestCheckNamesTheSetting(t *testing.T) {
	t.Parallel()
	require.NoError(t, app.Check(&config.Config{}), "zero settings are the components' defaults")
	require.NoError(t, app.Check(&config.Config{Batch: config.Batch{Window: "off"}}))
	require.NoError(t, app.Check(&config.Config{Batch: config.Batch{Window: "01:00-06:00", Timezone: "Europe/Paris", MaxLines: 50000},
		Retry: config.Retry{MaxDelay: time.Second}, Backpressure: config.Backpressure{SoftDepth: 5, HardDepth: 6}}))

	for _, tc := range []struct {
		s    config.Config
		want string
	}{
		{config.Config{Batch: config.Batch{Window: "25:00-06:00"}}, "batch.window: batchapi: window"},
		{config.Config{Batch: config.Batch{Window: "06:00-06:00"}}, `batch.window: "06:00-06:00" is empty`},
		{config.Config{Batch: config.Batch{Timezone: "Mars/Olympus"}}, "batch.timezone: "},
		{config.Config{Batch: config.Batch{MaxLines: 50001}}, "batch.max_lines: must be in 1..50000"},
		{config.Config{Retry: config.Retry{BaseDelay: 2 * time.Second, MaxDelay: time.Second}}, "retry.max_delay: must be at least retry.base_delay (2s)"},
		{config.Config{Retry: config.Retry{MaxDelay: 100 * time.Millisecond}}, "retry.max_delay: must be at least retry.base_delay (500ms)"},
		{config.Config{Backpressure: config.Backpressure{SoftDepth: 10, HardDepth: 5}}, "backpressure.hard_depth: must exceed backpressure.soft_depth (10)"},
		{config.Config{Backpressure: config.Backpressure{SoftDepth: 200000}}, "backpressure.hard_depth: must exceed backpressure.soft_depth (200000); got 100000"},
	} {
		err := app.Check(&tc.s)
		require.ErrorIs(t, err, config.ErrInvalid, tc.want)
		require.ErrorContains(t, err, tc.want)
	}
}
