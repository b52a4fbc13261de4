package shaping

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The long/short mix of docs/design/rate-limiting.md at 5x the binding
// quota (TPM binds).
const (
	simRPM = 300.0
	simTPM = 300_000.0
)

func simUpstream(refund bool) upstreamConfig {
	return upstreamConfig{
		RPM: simRPM, TPM: simTPM, Refund: refund, Headers: true,
		Saturation: 32, TTFT: 200 * time.Millisecond, PerToken: 5 * time.Millisecond,
	}
}

func overload(strategy Strategy, refund bool) simConfig {
	cfg := simConfig{
		lane:     LaneConfig{Name: "sim", Strategy: strategy, RPM: simRPM, TPM: simTPM, Concurrency: 64},
		up:       simUpstream(refund),
		workers:  64,
		arrivals: 5 * simTPM / 60 / 1800, // about 5x what TPM admits
		duration: 10 * time.Minute,
		seed:     7,
	}
	if !refund {
		cfg.lane.Settlement = SettleReserved
	}
	return cfg
}

func TestSimulationShapeOverload(t *testing.T) {
	t.Parallel()
	for _, refund := range []bool{true, false} {
		res, err := runSim(overload(StrategyShape, refund))
		require.NoError(t, err)
		from, to := res.start.Add(2*time.Minute), res.start.Add(10*time.Minute)
		util := res.up.tokenRate(from, to) / simTPM
		t.Logf("shape refund=%v: utilisation %.3f, ok %d, 429s %d, backlog %d", refund, util, res.up.ok, res.up.limited, res.backlog)
		require.Zero(t, res.up.limited, "shape must cause no 429")
		require.GreaterOrEqual(t, util, 0.95)
		require.Positive(t, res.backlog, "the load must be an overload")
	}
}

func TestSimulationRetryStorm(t *testing.T) {
	t.Parallel()
	// Retry's storm costs goodput; where rejected requests use up quota too,
	// it collapses. Shape sends no request the server would reject.
	for _, chargeRejected := range []bool{true, false} {
		shapeCfg, retryCfg := overload(StrategyShape, true), overload(StrategyRetry, true)
		shapeCfg.up.ChargeRejected, retryCfg.up.ChargeRejected = chargeRejected, chargeRejected
		shape, err := runSim(shapeCfg)
		require.NoError(t, err)
		retry, err := runSim(retryCfg)
		require.NoError(t, err)
		from, to := shape.start.Add(2*time.Minute), shape.start.Add(10*time.Minute)
		su, ru := shape.up.tokenRate(from, to)/simTPM, retry.up.tokenRate(from, to)/simTPM
		longShare := func(u *upstream) float64 { return float64(u.okLong) / float64(u.ok) }
		t.Logf("charge rejected %v: retry utilisation %.3f vs shape %.3f; retry 429s %d (ok %d); long jobs among successes: retry %.3f, shape %.3f",
			chargeRejected, ru, su, retry.up.limited, retry.up.ok, longShare(retry.up), longShare(shape.up))
		require.Zero(t, shape.up.limited)
		require.Greater(t, retry.up.limited, retry.up.ok, "retry must storm: more 429s than successes")
		require.Less(t, ru, 0.9*su, "the storm must cost goodput")
		if chargeRejected {
			require.Less(t, ru, 0.5*su, "congestion collapse")
		}
	}
}

func TestSimulationRPMTokenBlind(t *testing.T) {
	t.Parallel()
	res, err := runSim(overload(StrategyRPM, true))
	require.NoError(t, err)
	t.Logf("rpm: ok %d, 429s %d", res.up.ok, res.up.limited)
	require.Positive(t, res.up.limited, "rpm alone is blind to TPM")
}

// firstReach returns when the 10 s goodput window first reaches frac of
// limit (per minute) at or after from, or false.
func firstReach(u *upstream, from, until time.Time, limit, frac float64) (time.Time, bool) {
	for t := from.Add(10 * time.Second); !t.After(until); t = t.Add(time.Second) {
		if u.tokenRate(t.Add(-10*time.Second), t) >= frac*limit {
			return t, true
		}
	}
	return time.Time{}, false
}

// Adaptive with unknown quotas finds the hidden TPM, and its halving, within
// 30 simulated seconds: from the rate-limit headers when the server sends
// them, and from 429s with Retry-After alone when it does not.
func TestSimulationAdaptiveUnknownQuota(t *testing.T) {
	t.Parallel()
	for _, headers := range []bool{true, false} {
		for _, seed := range []uint64{11, 3, 21} {
			up := simUpstream(true)
			up.StartEmpty = true // no free burst from a full server bucket
			up.Headers = headers
			cfg := simConfig{
				lane:     LaneConfig{Name: "sim", Strategy: StrategyAdaptive, Concurrency: 2},
				up:       up,
				workers:  64,
				arrivals: 5 * simTPM / 60 / 1800,
				duration: 4 * time.Minute,
				seed:     seed,
				changeAt: 2 * time.Minute,
				change: func(now time.Time, u *upstream) {
					u.setLimits(now, simRPM/2, simTPM/2)
				},
			}
			res, err := runSim(cfg)
			require.NoError(t, err)
			s, change := res.start, res.start.Add(2*time.Minute)
			reach, ok := firstReach(res.up, s, s.Add(30*time.Second), simTPM, 0.9)
			require.True(t, ok, "headers %v seed %d: 90%% of the hidden TPM within 30 s", headers, seed)
			reach2, ok := firstReach(res.up, change, change.Add(30*time.Second), simTPM/2, 0.9)
			require.True(t, ok, "headers %v seed %d: 90%% of the halved TPM within 30 s", headers, seed)
			sustained := res.up.tokenRate(reach, change) / simTPM
			sustained2 := res.up.tokenRate(reach2, s.Add(4*time.Minute)) / (simTPM / 2)
			t.Logf("headers %v seed %d: reached at %v (sustained %.3f), after halving at +%v (sustained %.3f); 429s %d of %d",
				headers, seed, reach.Sub(s), sustained, reach2.Sub(change), sustained2, res.up.limited, res.up.ok+res.up.limited)
			require.GreaterOrEqual(t, sustained, 0.9)
			require.GreaterOrEqual(t, sustained2, 0.9)
			require.Less(t, float64(res.up.limited), 0.1*float64(res.up.ok), "few 429s")
		}
	}
}
