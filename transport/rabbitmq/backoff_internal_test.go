package rabbitmq

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRedialBackoff: redials wait ReconnectMin, doubling up to
// ReconnectMax (100 ms to 5 s by default), without jitter.
func TestRedialBackoff(t *testing.T) {
	t.Parallel()
	cfg := Config{}.WithDefaults()
	var got []time.Duration
	for n := range 8 {
		got = append(got, backoff(cfg, n))
	}
	ms := time.Millisecond
	require.Equal(t, []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 5 * time.Second, 5 * time.Second}, got)
}
