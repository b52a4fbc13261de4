package shaping

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStrategyFor: a configured strategy that needs a quota the lane lacks
// runs as adaptive (which learns them), not as a lane that fails to build.
func TestStrategyFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s        Strategy
		rpm, tpm float64
		want     Strategy
	}{
		{"", 0, 0, StrategyAdaptive},
		{"", 60, 0, StrategyShape},
		{StrategyShape, 0, 0, StrategyAdaptive},
		{StrategyShape, 0, 20_000, StrategyShape},
		{StrategyRPM, 0, 20_000, StrategyShape},
		{StrategyRPM, 60, 0, StrategyRPM},
		{StrategyRetry, 0, 0, StrategyRetry},
		{StrategyAdaptive, 60, 20_000, StrategyAdaptive},
	} {
		got := StrategyFor(tc.s, tc.rpm, tc.tpm)
		require.Equal(t, tc.want, got, "%q rpm %v tpm %v", tc.s, tc.rpm, tc.tpm)
		_, err := NewLane(LaneConfig{Strategy: got, RPM: tc.rpm, TPM: tc.tpm})
		require.NoError(t, err)
	}
}
