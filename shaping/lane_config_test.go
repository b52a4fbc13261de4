package shaping

import (
	"math"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

func TestLaneConfigDefaults(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(t0)
	for _, tc := range []struct {
		name   string
		in     LaneConfig
		expect LaneConfig
	}{
		{"shape from known quotas: pacing of one RPM period, warm-up",
			LaneConfig{RPM: 120, TPM: 1000},
			LaneConfig{Strategy: StrategyShape, RPM: 120, TPM: 1000, Concurrency: 16, MaxConcurrency: 512,
				MinInterval: 500 * time.Millisecond, WarmUp: 10 * time.Second, ColdStart: ColdStartProbe, ShortBucket: 5 * time.Second, SendSkew: 100 * time.Millisecond,
				DefaultMaxOutput: 1024, PauseDefault: time.Second, MaxRetryAfter: 10 * time.Minute}},
		{"adaptive without quotas: no pacing",
			LaneConfig{},
			LaneConfig{Strategy: StrategyAdaptive, Concurrency: 16, MaxConcurrency: 512, WarmUp: 10 * time.Second,
				ColdStart: ColdStartProbe, ShortBucket: 5 * time.Second, SendSkew: 100 * time.Millisecond, DefaultMaxOutput: 1024, PauseDefault: time.Second, MaxRetryAfter: 10 * time.Minute}},
		{"shape with TPM only: no pacing",
			LaneConfig{TPM: 1000},
			LaneConfig{Strategy: StrategyShape, TPM: 1000, Concurrency: 16, MaxConcurrency: 512, WarmUp: 10 * time.Second,
				ColdStart: ColdStartProbe, ShortBucket: 5 * time.Second, SendSkew: 100 * time.Millisecond, DefaultMaxOutput: 1024, PauseDefault: time.Second, MaxRetryAfter: 10 * time.Minute}},
		{"rpm: neither pacing nor warm-up",
			LaneConfig{Strategy: StrategyRPM, RPM: 60},
			LaneConfig{Strategy: StrategyRPM, RPM: 60, Concurrency: 16, MaxConcurrency: 512, ColdStart: ColdStartStatic, ShortBucket: 5 * time.Second, SendSkew: 100 * time.Millisecond,
				DefaultMaxOutput: 1024, PauseDefault: time.Second, MaxRetryAfter: 10 * time.Minute}},
		{"retry: neither pacing nor warm-up",
			LaneConfig{Strategy: StrategyRetry, RPM: 60},
			LaneConfig{Strategy: StrategyRetry, RPM: 60, Concurrency: 16, MaxConcurrency: 512, ColdStart: ColdStartStatic, ShortBucket: 5 * time.Second, SendSkew: 100 * time.Millisecond,
				DefaultMaxOutput: 1024, PauseDefault: time.Second, MaxRetryAfter: 10 * time.Minute}},
		{"a concurrency above the max default raises the max",
			LaneConfig{Strategy: StrategyAdaptive, Concurrency: 600},
			LaneConfig{Strategy: StrategyAdaptive, Concurrency: 600, MaxConcurrency: 600, WarmUp: 10 * time.Second,
				ColdStart: ColdStartProbe, ShortBucket: 5 * time.Second, SendSkew: 100 * time.Millisecond, DefaultMaxOutput: 1024, PauseDefault: time.Second, MaxRetryAfter: 10 * time.Minute}},
		{"set values and -1 stay; a warm-up set makes the start static",
			LaneConfig{Strategy: StrategyAdaptive, RPM: 60, Concurrency: 2, MaxConcurrency: 3, MinInterval: -1, WarmUp: -1,
				DefaultMaxOutput: 7, PauseDefault: 3 * time.Second, Settlement: SettleReserved, ShortBucket: time.Second, SendSkew: -1, MaxRetryAfter: time.Minute},
			LaneConfig{Strategy: StrategyAdaptive, RPM: 60, Concurrency: 2, MaxConcurrency: 3, MinInterval: -1, WarmUp: -1,
				DefaultMaxOutput: 7, PauseDefault: 3 * time.Second, Settlement: SettleReserved, ColdStart: ColdStartStatic,
				ShortBucket: time.Second, SendSkew: -1, MaxRetryAfter: time.Minute}},
		{"a start set makes it static too; a cold start set stays",
			LaneConfig{Strategy: StrategyShape, RPM: 60, Start: StartFull, ColdStart: ColdStartProbe},
			LaneConfig{Strategy: StrategyShape, RPM: 60, Start: StartFull, ColdStart: ColdStartProbe, Concurrency: 16, MaxConcurrency: 512,
				MinInterval: time.Second, WarmUp: 10 * time.Second, ShortBucket: 5 * time.Second, SendSkew: 100 * time.Millisecond, DefaultMaxOutput: 1024,
				PauseDefault: time.Second, MaxRetryAfter: 10 * time.Minute}},
		{"shape with a start set",
			LaneConfig{Strategy: StrategyShape, RPM: 60, Start: StartEmpty},
			LaneConfig{Strategy: StrategyShape, RPM: 60, Start: StartEmpty, ColdStart: ColdStartStatic, Concurrency: 16, MaxConcurrency: 512,
				MinInterval: time.Second, WarmUp: 10 * time.Second, ShortBucket: 5 * time.Second, SendSkew: 100 * time.Millisecond, DefaultMaxOutput: 1024,
				PauseDefault: time.Second, MaxRetryAfter: 10 * time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.in.Clock, tc.expect.Clock = clock, clock
			require.Equal(t, tc.expect, tc.in.WithDefaults())
		})
	}
	require.NotNil(t, LaneConfig{}.WithDefaults().Clock, "the real clock by default")
}

func TestLaneConfigValidate(t *testing.T) {
	t.Parallel()
	bucket, err := NewBucket(BucketConfig{Limit: 1}, t0)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		cfg  LaneConfig
		err  string // "" = valid
	}{
		{"unknown strategy", LaneConfig{Strategy: "fast"}, `LaneConfig.Strategy: shaping: unknown strategy "fast" (want retry, rpm, shape or adaptive)`},
		{"RPM negative", LaneConfig{RPM: -1}, "LaneConfig.RPM must be >= 0, got -1"},
		{"RPM infinite", LaneConfig{RPM: math.Inf(1)}, "LaneConfig.RPM must be >= 0, got +Inf"},
		{"RPM NaN", LaneConfig{RPM: math.NaN()}, "LaneConfig.RPM must be >= 0, got NaN"},
		{"TPM negative", LaneConfig{TPM: -1}, "LaneConfig.TPM must be >= 0, got -1"},
		{"TPM infinite", LaneConfig{TPM: math.Inf(-1)}, "LaneConfig.TPM must be >= 0, got -Inf"},
		{"TPM NaN", LaneConfig{TPM: math.NaN()}, "LaneConfig.TPM must be >= 0, got NaN"},
		{"rpm without RPM", LaneConfig{Strategy: StrategyRPM, TPM: 10}, "LaneConfig.RPM is required by strategy rpm"},
		{"rpm with RPM", LaneConfig{Strategy: StrategyRPM, RPM: 10}, ""},
		{"shape without quotas", LaneConfig{Strategy: StrategyShape}, "LaneConfig.RPM or TPM is required by strategy shape"},
		{"shape with RPM only", LaneConfig{Strategy: StrategyShape, RPM: 10}, ""},
		{"shape with TPM only", LaneConfig{Strategy: StrategyShape, TPM: 10}, ""},
		{"adaptive without quotas", LaneConfig{Strategy: StrategyAdaptive}, ""},
		{"retry without quotas", LaneConfig{Strategy: StrategyRetry}, ""},
		{"concurrency below 1", LaneConfig{Concurrency: -1}, "LaneConfig.Concurrency must be >= 1, got -1"},
		{"concurrency 1", LaneConfig{Concurrency: 1, MaxConcurrency: 1}, ""},
		{"max below concurrency", LaneConfig{Concurrency: 5, MaxConcurrency: 4}, "LaneConfig.MaxConcurrency 4 below Concurrency 5"},
		{"MinInterval -2", LaneConfig{MinInterval: -2}, "LaneConfig.MinInterval and WarmUp must be >= -1"},
		{"WarmUp -2", LaneConfig{WarmUp: -2}, "LaneConfig.MinInterval and WarmUp must be >= -1"},
		{"MinInterval and WarmUp -1", LaneConfig{MinInterval: -1, WarmUp: -1}, ""},
		{"DefaultMaxOutput negative", LaneConfig{DefaultMaxOutput: -1}, "LaneConfig.DefaultMaxOutput must be >= 1, got -1"},
		{"DefaultMaxOutput 1", LaneConfig{DefaultMaxOutput: 1}, ""},
		{"unknown settlement", LaneConfig{Settlement: 2}, "LaneConfig.Settlement unknown value 2"},
		{"negative settlement", LaneConfig{Settlement: -1}, "LaneConfig.Settlement unknown value -1"},
		{"settle reserved", LaneConfig{Settlement: SettleReserved}, ""},
		{"negative pause", LaneConfig{PauseDefault: -time.Second}, "LaneConfig.PauseDefault must be >= 0, got -1s"},
		{"negative max retry-after", LaneConfig{MaxRetryAfter: -time.Second}, "LaneConfig.MaxRetryAfter must be >= 0, got -1s"},
		{"unknown cold start", LaneConfig{ColdStart: "hot"}, `LaneConfig.ColdStart must be probe or static, got "hot"`},
		{"negative short bucket", LaneConfig{ShortBucket: -time.Second}, "LaneConfig.ShortBucket must be >= 0, got -1s"},
		{"static cold start", LaneConfig{ColdStart: ColdStartStatic}, ""},
		{"nil quota bucket", LaneConfig{Quotas: []Quota{{Bucket: bucket}, {}}}, "LaneConfig.Quotas[1].Bucket is nil"},
		{"quota buckets", LaneConfig{Quotas: []Quota{{Bucket: bucket}}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.cfg.Clock = clockwork.NewFakeClockAt(t0)
			lane, err := NewLane(tc.cfg)
			if tc.err == "" {
				require.NoError(t, err)
				require.NotNil(t, lane)
				return
			}
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.EqualError(t, err, "shaping: invalid config: "+tc.err)
			require.Nil(t, lane)
		})
	}
}
