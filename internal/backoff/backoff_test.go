package backoff

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// top is a source whose every draw is the largest: the top of the window.
type top struct{}

func (top) Uint64() uint64 { return math.MaxUint64 }

func TestExp(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	p := Policy{Base: 100 * ms, Max: time.Second}
	for retry, want := range []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second, time.Second} {
		require.Equal(t, want, p.Exp(retry), "retry %d", retry)
	}
	require.Equal(t, time.Second, p.Exp(1000), "far retries stay at Max")
	require.Equal(t, 100*ms, p.Exp(-1), "a negative retry is the first")
	huge := Policy{Base: time.Second, Max: math.MaxInt64}
	require.Equal(t, time.Duration(math.MaxInt64), huge.Exp(100), "no overflow")
	require.Equal(t, 3*time.Nanosecond, Policy{Base: 2, Max: 3}.Exp(1), "the odd Max")
	require.Equal(t, time.Second, Policy{Base: time.Minute, Max: time.Second}.Exp(0), "Base over Max: Max")
	require.Equal(t, time.Duration(0), Policy{Max: time.Second}.Exp(5), "a zero Base stays zero")
	require.Equal(t, time.Duration(0), Policy{}.Delay(3, time.Hour, nil), "the zero Policy waits nothing")
}

func TestDelay(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	det := Policy{Base: 300 * ms, Max: time.Second, MaxRetryAfter: 2 * time.Second}
	jit := det
	jit.Jitter = true
	tests := []struct {
		name       string
		p          Policy
		rng        *rand.Rand
		retry      int
		retryAfter time.Duration
		want       time.Duration
	}{
		{"deterministic: the exponential figure", det, nil, 1, 0, 600 * ms},
		{"deterministic: a shorter Retry-After", det, nil, 1, 500 * ms, 600 * ms},
		{"deterministic: a longer Retry-After", det, nil, 1, 1500 * ms, 1500 * ms},
		{"deterministic: Retry-After clamped", det, nil, 0, time.Hour, 2 * time.Second},
		{"jitter: the top of the window", jit, rand.New(top{}), 2, 0, time.Second},
		{"jitter: a seeded draw", jit, rand.New(rand.NewPCG(1, 2)), 2, 0, time.Duration(rand.New(rand.NewPCG(1, 2)).Int64N(int64(time.Second) + 1))},
		{"jitter: a longer Retry-After than the draw", jit, rand.New(top{}), 0, 400 * ms, 400 * ms},
		{"jitter: a shorter Retry-After than the draw", jit, rand.New(top{}), 0, 200 * ms, 300 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.p.Delay(tt.retry, tt.retryAfter, tt.rng))
		})
	}
}

// TestDelayGlobalRand: without a source the draw comes from the global one,
// over the whole window (a window of 1ns has two values).
func TestDelayGlobalRand(t *testing.T) {
	t.Parallel()
	p := Policy{Base: time.Nanosecond, Max: time.Nanosecond, Jitter: true}
	seen := map[time.Duration]bool{}
	for range 200 {
		seen[p.Delay(0, 0, nil)] = true
	}
	require.Equal(t, map[time.Duration]bool{0: true, 1: true}, seen)
}
