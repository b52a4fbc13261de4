package soak

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPlan: the nemesis's plan is a function of the seed; every kind
// comes at least 3 times, every fault overlaps another and ends before the
// soak does, whatever the length.
func TestPlan(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{20 * time.Second, 2 * time.Minute, 15 * time.Minute, time.Hour} {
		for seed := range uint64(50) {
			plan := Plan(seed, d)
			require.Equal(t, plan, Plan(seed, d), "replayable")
			for _, k := range Kinds {
				require.GreaterOrEqual(t, Counts(plan)[k], 3, "%s, seed %d: %s", d, seed, k)
			}
			require.Equal(t, len(plan), Overlaps(plan), "%s, seed %d: every fault overlaps another", d, seed)
			for _, f := range plan {
				require.Positive(t, f.For, "%s, seed %d: %s", d, seed, f)
				require.LessOrEqual(t, f.At+f.For, d, "%s, seed %d: %s", d, seed, f)
				require.GreaterOrEqual(t, f.At, time.Duration(0))
			}
		}
	}
	require.NotEqual(t, Plan(1, 15*time.Minute), Plan(2, 15*time.Minute))
	require.Len(t, Plan(1, time.Hour), 15*len(Kinds), "one of each kind every 4 minutes")
}

// TestOverlaps: faults that share a moment overlap; ones that only touch
// do not.
func TestOverlaps(t *testing.T) {
	t.Parallel()
	s := time.Second
	require.Equal(t, 2, Overlaps([]Fault{{At: 0, For: 10 * s}, {At: 9 * s, For: s}, {At: 10 * s, For: s}}[:2]))
	require.Equal(t, 0, Overlaps([]Fault{{At: 0, For: 10 * s}, {At: 10 * s, For: s}}))
}
