package worker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/shaping"
)

// TestLaneRate: a lane's row gives its concurrency limit when the lane
// knows it (configured), and 0 while a slow start grows it (nothing known
// of the provider): the limit of the moment is not what the lane runs at.
func TestLaneRate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  shaping.LaneConfig
		want int
	}{
		{"configured", shaping.LaneConfig{Name: "m", Strategy: shaping.StrategyShape, RPM: 600, Concurrency: 4}, 4},
		{"slow start", shaping.LaneConfig{Name: "m", Strategy: shaping.StrategyAdaptive}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			shaper, err := shaping.NewLane(tc.cfg)
			require.NoError(t, err)
			l := &lane{model: "m", shaper: shaper}
			s := shaper.Snapshot()
			require.Positive(t, s.ConcurrencyLimit)
			r := l.rate(s)
			require.Equal(t, "m", r.Model)
			require.Equal(t, tc.want, r.Concurrency)
		})
	}
}
