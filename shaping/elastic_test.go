package shaping

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestElasticConfig(t *testing.T) {
	t.Parallel()
	require.Equal(t, ElasticConfig{
		Initial: 4, Min: 1, Max: 512, Gain: 1, MinStep: 1, MaxGrowth: 0.5, Backoff: 0.7, HoldFactor: 2,
		Alpha: 0.2, Headroom: 1.2, IdleAfter: 30 * time.Second, DrainMin: time.Second,
	}, ElasticConfig{}.WithDefaults())
	for _, tc := range []struct {
		cfg ElasticConfig
		err string // "" = valid
	}{
		{ElasticConfig{Min: -1}, "ElasticConfig.Min must be >= 1, got -1"},
		{ElasticConfig{Min: 1, Initial: 1, Max: 1}, ""},
		{ElasticConfig{Min: 3, Max: 2}, "ElasticConfig.Max 2 below Min 3"},
		{ElasticConfig{Min: 2, Initial: 1, Max: 3}, "ElasticConfig.Initial 1 outside [Min, Max]"},
		{ElasticConfig{Min: 2, Initial: 4, Max: 3}, "ElasticConfig.Initial 4 outside [Min, Max]"},
		{ElasticConfig{Min: 2, Initial: 2, Max: 3}, ""},
		{ElasticConfig{Min: 2, Initial: 3, Max: 3}, ""},
		{ElasticConfig{Backoff: 1}, "ElasticConfig.Backoff must be in (0, 1), got 1"},
		{ElasticConfig{Backoff: -0.5}, "ElasticConfig.Backoff must be in (0, 1), got -0.5"},
		{ElasticConfig{Backoff: 0.99}, ""},
		{ElasticConfig{Alpha: 1}, ""},
		{ElasticConfig{Alpha: 1.01}, "ElasticConfig.Alpha must be in (0, 1], got 1.01"},
		{ElasticConfig{Alpha: -0.1}, "ElasticConfig.Alpha must be in (0, 1], got -0.1"},
		{ElasticConfig{Gain: -1}, "ElasticConfig.Gain, MinStep, MaxGrowth must be positive"},
		{ElasticConfig{MinStep: -1}, "ElasticConfig.Gain, MinStep, MaxGrowth must be positive"},
		{ElasticConfig{MaxGrowth: -1}, "ElasticConfig.Gain, MinStep, MaxGrowth must be positive"},
		{ElasticConfig{HoldFactor: 1}, "ElasticConfig.HoldFactor must be > 1 and Headroom >= 1"},
		{ElasticConfig{HoldFactor: 1.01}, ""},
		{ElasticConfig{Headroom: 0.99}, "ElasticConfig.HoldFactor must be > 1 and Headroom >= 1"},
		{ElasticConfig{Headroom: 1}, ""},
		{ElasticConfig{IdleAfter: -2}, "ElasticConfig.IdleAfter must be >= -1, got -2ns"},
		{ElasticConfig{IdleAfter: -1}, ""},
	} {
		e, err := NewElastic(tc.cfg)
		if tc.err == "" {
			require.NoError(t, err, "%+v", tc.cfg)
			require.Equal(t, tc.cfg.WithDefaults().Initial, e.Limit())
			require.Equal(t, StateProbing, e.State())
			continue
		}
		require.ErrorIs(t, err, ErrInvalidConfig)
		require.EqualError(t, err, "shaping: invalid config: "+tc.err)
		require.Nil(t, e)
	}
}

// TestElasticTrace follows one controller through probing, no evidence,
// saturation (HOLD), a drop (DRAIN) and its end, with the exact limit and
// EMAs after each sample.
func TestElasticTrace(t *testing.T) {
	t.Parallel()
	e, err := NewElastic(ElasticConfig{Initial: 4, Max: 100})
	require.NoError(t, err)
	type want struct {
		limit                      float64
		state                      string
		emaLatency, emaTPT, tokens float64
	}
	check := func(w want, msg string) {
		t.Helper()
		require.InDelta(t, w.limit, e.limit, 1e-12, msg)
		require.Equal(t, max(1, int(w.limit)), e.Limit(), msg)
		require.Equal(t, w.state, e.State(), msg)
		require.InDelta(t, w.emaLatency, e.emaLatency, 1e-12, msg)
		require.InDelta(t, w.emaTPT, e.emaTPT, 1e-12, msg)
		require.InDelta(t, w.tokens, e.emaTokens, 1e-12, msg)
	}
	at := func(s float64) time.Time { return sec(s) }

	e.Update(Sample{At: at(0), Latency: time.Second, Tokens: 100, OutputTokens: 10, InFlight: 4})
	// 4.8 in flight with headroom >= 4: grow by step/limit, step = min(spring 4, governor 2).
	check(want{4 + 2.0/4, StateProbing, 1, 0.1, 100}, "first sample: the EMAs start at it")

	e.Update(Sample{At: at(1), Latency: 2 * time.Second, Tokens: 200, OutputTokens: 20, InFlight: 3})
	// 3.6 in flight with headroom < 4: no evidence to grow on.
	check(want{4.5, StateProbing, 0.8*1 + 0.2*2, 0.1, 0.8*100 + 0.2*200}, "limit not used")

	e.Update(Sample{At: at(2), Latency: 3 * time.Second, Tokens: 100, OutputTokens: 10, InFlight: 5})
	// 0.3 s per token is above twice the EMA (0.1): saturation.
	check(want{4.5, StateHold, 0.8*1.2 + 0.2*3, 0.8*0.1 + 0.2*0.3, 0.8*120 + 0.2*100}, "hold")

	e.Update(Sample{At: at(3), Latency: time.Second, Dropped: true})
	check(want{4.5 * 0.7, StateDrain, 1.56, 0.14, 116}, "a drop: backoff and drain")
	require.Equal(t, 4.5, e.best)
	require.Equal(t, at(3).Add(1560*time.Millisecond), e.drainUntil, "the drain lasts the latency EMA")

	e.Update(Sample{At: at(3.5), Latency: time.Second, Dropped: true})
	check(want{3.15, StateDrain, 1.56, 0.14, 116}, "the same burst counts once")

	e.Update(Sample{At: at(4), Latency: time.Second, Tokens: 100, OutputTokens: 10, InFlight: 10})
	check(want{3.15, StateDrain, 0.8*1.56 + 0.2, 0.8*0.14 + 0.2*0.1, 0.8*116 + 0.2*100}, "no growth while draining")

	require.Equal(t, 3, e.Tick(at(4.5599)))
	require.Equal(t, StateDrain, e.State())
	require.Equal(t, 3, e.Tick(at(4.56)))
	require.Equal(t, StateProbing, e.State(), "the drain ends at drainUntil")

	e.Update(Sample{At: at(5), Latency: time.Second, Tokens: 100, OutputTokens: 10, InFlight: 10})
	// The spring pulls towards best (4.5): tension 1-3.15/4.5 = 0.3, spring
	// 0.945, below MinStep 1.
	check(want{3.15 + 1/3.15, StateProbing, 0.8*1.448 + 0.2, 0.8*0.132 + 0.2*0.1, 0.8*112.8 + 0.2*100}, "probing again")

	// A sample of unknown usage feeds only the latency EMA.
	e.Update(Sample{At: at(5.5), Latency: time.Second, InFlight: 1})
	check(want{3.15 + 1/3.15, StateProbing, 0.8*(0.8*1.448+0.2) + 0.2, 0.8*0.132 + 0.2*0.1, 0.8*112.8 + 0.2*100}, "usage unknown")

	e.Update(Sample{At: at(6), Latency: time.Second, Tokens: 100, InFlight: 10, Dropped: true})
	require.Equal(t, StateDrain, e.State())
	e.Update(Sample{At: e.drainUntil, Latency: time.Second, Dropped: true})
	require.InDelta(t, (3.15+1/3.15)*0.7*0.7, e.limit, 1e-12, "a drop at the end of a drain counts again")
}

func TestElasticStep(t *testing.T) {
	t.Parallel()
	e, err := NewElastic(ElasticConfig{Gain: 2, MinStep: 1.5, MaxGrowth: 0.25})
	require.NoError(t, err)
	for _, tc := range []struct {
		limit, best, step float64
	}{
		{4, 0, 1.5},                           // spring 8 capped at max(MinStep, 1): MinStep
		{40, 0, 10},                           // spring 80 capped by the governor, 40 x 0.25
		{40, 50, 10},                          // spring 40 x 0.2 x 2 = 16, governor 10
		{40, 44, 40 * (1 - 40.0/44) * 2},      // spring 7.27, between MinStep and the governor
		{40, 400, 10},                         // far below best: governor
		{40, 40, 1.5},                         // at best: no tension, MinStep
		{40, 20, 1.5},                         // above best: tension 0, MinStep
		{10, 100, 2.5},                        // spring 18, governor 2.5
		{2, 0, 1.5},                           // governor 0.5 below MinStep: MinStep
		{100, 110, 100 * (1 - 100.0/110) * 2}, // spring 18.18 between MinStep and governor 25
	} {
		e.limit, e.best = tc.limit, tc.best
		require.InDelta(t, tc.step, e.step(), 1e-12, "limit %v best %v", tc.limit, tc.best)
	}
}

// TestElasticCeiling: known quotas cap the limit at Headroom x rate x
// latency (Little's law), the tighter of RPM and TPM, never below Min.
func TestElasticCeiling(t *testing.T) {
	t.Parallel()
	e, err := NewElastic(ElasticConfig{Min: 2, Initial: 2, Max: 50, Headroom: 1.5})
	require.NoError(t, err)
	require.Equal(t, 50.0, e.ceiling(), "no latency yet")
	e.emaLatency, e.emaTokens = 2, 1000
	require.Equal(t, 50.0, e.ceiling(), "no quota known")
	e.SetGuide(600, 0)
	require.InDelta(t, 1.5*600.0/60*2, e.ceiling(), 1e-12, "RPM: 30")
	e.SetGuide(600, 300_000)
	require.InDelta(t, 1.5*300_000.0/60/1000*2, e.ceiling(), 1e-12, "TPM binds: 15")
	e.SetGuide(60, 300_000)
	require.InDelta(t, 1.5*60.0/60*2, e.ceiling(), 1e-12, "RPM binds: 3")
	e.SetGuide(6, 300_000)
	require.Equal(t, 2.0, e.ceiling(), "never below Min")
	e.emaTokens = 0
	e.SetGuide(0, 300_000)
	require.Equal(t, 50.0, e.ceiling(), "TPM needs a token EMA")

	// Growth stops at the ceiling but does not cut a limit above it.
	e.SetGuide(600, 0) // ceiling 30
	e.limit = 29.9
	e.Update(Sample{At: t0, Latency: 2 * time.Second, InFlight: 100})
	require.Equal(t, 30.0, e.limit)
	e.limit = 40
	e.Update(Sample{At: t0, Latency: 2 * time.Second, InFlight: 100})
	require.Equal(t, 40.0, e.limit)
}

// TestElasticIdleRestart: after IdleAfter without activity a tick halves the
// limit, not below Initial; -1 disables it.
func TestElasticIdleRestart(t *testing.T) {
	t.Parallel()
	e, err := NewElastic(ElasticConfig{Initial: 4, IdleAfter: 10 * time.Second})
	require.NoError(t, err)
	require.Equal(t, 4, e.Tick(sec(100)), "never seen: nothing to restart")
	e.limit = 20
	e.Update(Sample{At: sec(100), Latency: time.Second})
	require.Equal(t, 20, e.Tick(sec(110)), "exactly IdleAfter")
	require.Equal(t, 10, e.Tick(sec(120.001)))
	require.Equal(t, 5, e.Tick(sec(130.002)))
	require.Equal(t, 4, e.Tick(sec(140.003)), "not below Initial")
	require.Equal(t, 4, e.Tick(sec(100)), "an old tick changes nothing")

	off, err := NewElastic(ElasticConfig{Initial: 4, IdleAfter: -1})
	require.NoError(t, err)
	off.limit = 20
	off.Update(Sample{At: sec(100), Latency: time.Second})
	require.Equal(t, 20, off.Tick(sec(1000)))
}

// TestElasticUsesHeadroom: the limit grows only while in flight x Headroom
// reaches it.
func TestElasticUsesHeadroom(t *testing.T) {
	t.Parallel()
	e, err := NewElastic(ElasticConfig{Initial: 10, Headroom: 1})
	require.NoError(t, err)
	e.Update(Sample{At: t0, Latency: time.Second, InFlight: 9})
	require.Equal(t, 10.0, e.limit)
	e.Update(Sample{At: t0, Latency: time.Second, InFlight: 10})
	require.InDelta(t, 10+5.0/10, e.limit, 1e-12)
}
