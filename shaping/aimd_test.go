package shaping

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestAIMD(t *testing.T) {
	t.Parallel()
	a, err := NewAIMD(AIMDConfig{Initial: 10, Max: 12})
	require.NoError(t, err)
	require.Equal(t, 10, a.Limit())
	steps := []struct {
		name  string
		s     Sample
		limit int
	}{
		{"half the limit in flight: +1", Sample{At: t0, InFlight: 5}, 11},
		{"less than half in flight: no evidence", Sample{At: t0, InFlight: 5}, 11},
		{"half in flight again", Sample{At: t0, InFlight: 6}, 12},
		{"capped at Max", Sample{At: t0, InFlight: 100}, 12},
		{"a drop: x0.7 (8.4)", Sample{At: sec(10), Latency: time.Second, Dropped: true}, 8},
		{"a drop within the latency window counts once", Sample{At: sec(10.999), Latency: time.Second, Dropped: true}, 8},
		{"a drop one latency later counts (5.88)", Sample{At: sec(11), Latency: time.Second, Dropped: true}, 5},
		{"growth resumes from the fraction (6.88)", Sample{At: sec(11), InFlight: 3}, 6},
	}
	for _, st := range steps {
		require.Equal(t, st.limit, a.Update(st.s), st.name)
		require.Equal(t, st.limit, a.Limit(), st.name)
		require.Equal(t, st.limit, a.Tick(st.s.At.Add(time.Hour)), "%s: Tick changes nothing", st.name)
	}
	for i := range 10 {
		a.Update(Sample{At: sec(20 + float64(i)), Latency: time.Second, Dropped: true})
	}
	require.Equal(t, 1, a.Limit(), "never below Min")
}

func TestAIMDConfig(t *testing.T) {
	t.Parallel()
	require.Equal(t, AIMDConfig{Initial: 4, Min: 1, Max: 256, Backoff: 0.7}, AIMDConfig{}.WithDefaults())
	for _, tc := range []struct {
		cfg AIMDConfig
		err string // "" = valid
	}{
		{AIMDConfig{Min: -1}, "AIMDConfig.Min must be >= 1, got -1"},
		{AIMDConfig{Min: 1, Initial: 1, Max: 1}, ""},
		{AIMDConfig{Min: 3, Max: 2}, "AIMDConfig.Max 2 below Min 3"},
		{AIMDConfig{Min: 2, Initial: 1, Max: 3}, "AIMDConfig.Initial 1 outside [Min, Max]"},
		{AIMDConfig{Min: 2, Initial: 4, Max: 3}, "AIMDConfig.Initial 4 outside [Min, Max]"},
		{AIMDConfig{Min: 2, Initial: 2, Max: 3}, ""},
		{AIMDConfig{Min: 2, Initial: 3, Max: 3}, ""},
		{AIMDConfig{Backoff: 1}, "AIMDConfig.Backoff must be in (0, 1), got 1"},
		{AIMDConfig{Backoff: -0.5}, "AIMDConfig.Backoff must be in (0, 1), got -0.5"},
		{AIMDConfig{Backoff: 0.99}, ""},
	} {
		a, err := NewAIMD(tc.cfg)
		if tc.err == "" {
			require.NoError(t, err, "%+v", tc.cfg)
			require.Equal(t, tc.cfg.WithDefaults().Initial, a.Limit())
			continue
		}
		require.ErrorIs(t, err, ErrInvalidConfig)
		require.EqualError(t, err, "shaping: invalid config: "+tc.err)
		require.Nil(t, a)
	}
}
