package store

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWaitPercentile: a percentile is the upper bound of the bucket where
// the nearest rank falls, never past the minute's longest wait.
func TestWaitPercentile(t *testing.T) {
	t.Parallel()
	// 100 calls: 50 waited under 1 ms, 40 from 100 to 200 ms, 9 from 1 to
	// 2 s, 1 waited 7.5 s.
	b := minuteBuilder{m: ModelMinute{Requests: 100}, maxMS: 7500,
		buckets: []bucketCount{{bucket: 0, n: 50}, {bucket: 7, n: 40}, {bucket: 10, n: 9}, {bucket: 12, n: 1}}}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{
		{0.01, 0}, {0.5, 0}, {0.51, 200 * time.Millisecond}, {0.9, 200 * time.Millisecond},
		{0.95, 2 * time.Second}, {0.99, 2 * time.Second}, {1, 7500 * time.Millisecond},
	} {
		require.Equal(t, c.want, b.percentile(c.p), "p%v", c.p*100)
	}
	b.maxMS = 3000 // the longest wait caps its bucket's bound
	require.Equal(t, 3*time.Second, b.percentile(1))
	last := minuteBuilder{m: ModelMinute{Requests: 1}, maxMS: 900_000, buckets: []bucketCount{{bucket: len(waitBounds), n: 1}}}
	require.Equal(t, 15*time.Minute, last.percentile(0.5), "past the last bound: the longest wait")
}
