package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTransientBackoff: a batch that failed for a passing reason is sent
// again after 1 s, doubling up to 30 s, without jitter.
func TestTransientBackoff(t *testing.T) {
	t.Parallel()
	var got []time.Duration
	for n := range 7 {
		got = append(got, transientBackoff.Exp(n))
	}
	s := time.Second
	require.Equal(t, []time.Duration{s, 2 * s, 4 * s, 8 * s, 16 * s, 30 * s, 30 * s}, got)
}
