package bench

import (
	"bytes"
	"context"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/workload"
	"github.com/llmq/llmq/shaping"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/jackc/puddle/v2.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	)
}

func TestArrivals(t *testing.T) {
	t.Parallel()
	s := spec{load: []phase{{until: 10 * time.Second, rate: 1}, {until: 20 * time.Second, rate: 5}, {until: 30 * time.Second, rate: 1}}}
	for _, tc := range []struct {
		at   time.Duration
		want int
	}{
		{0, 0}, {999 * time.Millisecond, 0}, {time.Second, 1}, {10 * time.Second, 10},
		{12 * time.Second, 20}, {20 * time.Second, 60}, {25 * time.Second, 65}, {30 * time.Second, 70}, {time.Hour, 70},
	} {
		require.Equal(t, tc.want, s.arrivals(tc.at), "at %s", tc.at)
	}
	half := s.scaled(0.5)
	require.Equal(t, 35, half.arrivals(15*time.Second), "scaling shortens every phase, not the rates")
}

func TestConvergence(t *testing.T) {
	t.Parallel()
	pts := make([]point, 20)
	for i := range pts {
		pts[i] = point{t: i, requests: 10, tokens: 100}
		if i < 6 {
			pts[i].tokens, pts[i].rateLimited = 50, 5 // still probing: 429s, half the limit
		}
	}
	limit := func(int) float64 { return 100 }
	d, ok := convergence(pts, 0, 4, 0.8, math.Inf(1), limit)
	require.True(t, ok)
	require.Equal(t, 6*time.Second, d, "first clean window is [6, 10)")
	d, ok = convergence(pts, 8, 4, 0.8, math.Inf(1), limit)
	require.True(t, ok)
	require.Equal(t, time.Duration(0), d)
	_, ok = convergence(pts, 0, 4, 0.8, math.Inf(1), func(int) float64 { return 1000 })
	require.False(t, ok, "never reaches 80% of a limit ten times higher")
	_, ok = convergence(pts, 0, 4, 0.8, 1.2, func(int) float64 { return 50 })
	require.False(t, ok, "never settles within 20% of a limit it exceeds twice")
	d, ok = convergence(pts, 0, 2, 0.8, 1.2, func(t int) float64 { return 50 + 50*float64(min(t/6, 1)) })
	require.True(t, ok)
	require.Equal(t, 6*time.Second, d, "settles once the limit is 100 and no 429s come")
}

func TestRecoveryAndAverages(t *testing.T) {
	t.Parallel()
	pts := []point{{t: 0, depth: 1}, {t: 1, depth: 8}, {t: 2, depth: 6}, {t: 3, depth: 2}, {t: 4, depth: 1}}
	d, ok := recovery(pts, 1, 2)
	require.True(t, ok)
	require.Equal(t, 2*time.Second, d)
	_, ok = recovery(pts, 1, 0)
	require.False(t, ok)
	require.Equal(t, []float64{2, 3, 4, 6}, movingAverage([]float64{2, 4, 6, 8}, 3))
}

// TestCountsByKind: a result counts the jobs of one kind, or of every
// kind, in a status and unfinished.
func TestCountsByKind(t *testing.T) {
	t.Parallel()
	r := &result{jobs: []jobResult{
		{kind: workload.KindLong, status: llmq.StatusSucceeded},
		{kind: workload.KindShort, status: llmq.StatusSucceeded},
		{kind: workload.KindShort, status: llmq.StatusSucceeded},
		{kind: workload.KindLong, status: llmq.StatusQueued},
		{kind: workload.KindShort, status: llmq.StatusRunning},
		{kind: workload.KindShort, status: llmq.StatusQueued},
		{kind: workload.KindLong, status: llmq.StatusDeadLettered},
	}}
	require.Equal(t, 1, r.countKind(llmq.StatusSucceeded, workload.KindLong))
	require.Equal(t, 2, r.countKind(llmq.StatusSucceeded, workload.KindShort))
	require.Equal(t, 3, r.unfinished(""))
	require.Equal(t, 1, r.unfinished(workload.KindLong))
	require.Equal(t, 2, r.unfinished(workload.KindShort))
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	_, err := Run(context.Background(), Config{Scale: -1})
	require.ErrorIs(t, err, ErrInvalidConfig)
	_, err = Run(context.Background(), Config{Only: []string{"nope"}})
	require.ErrorIs(t, err, ErrInvalidConfig)
}

// TestRunScaledDown runs the strategy comparison and the fallback
// experiment at a tenth of their durations and checks the report.
func TestRunScaledDown(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the pipeline for about 20 s")
	}
	out := t.TempDir()
	var progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{Out: out, Scale: 0.1, Only: []string{ScenarioStrategies, ScenarioFallback}, Progress: &progress})
	require.NoError(t, err, progress.String())

	require.Len(t, rep.Strategies, len(shaping.Strategies))
	want := strategySpec(shaping.StrategyShape).scaled(0.1)
	for i, r := range rep.Strategies {
		require.Equal(t, shaping.Strategies[i], r.Strategy)
		require.Equal(t, want.arrivals(want.duration), r.Arrived, "every job published is in Postgres")
		require.Equal(t, r.Arrived, r.Succeeded+r.DeadLettered+r.Unfinished, "no job failed or expired")
		require.Positive(t, r.Succeeded, "%s served some jobs", r.Strategy)
		longs := 0
		for n := range r.Arrived {
			if want.mix.Kind(n) == workload.KindLong {
				longs++
			}
		}
		require.Equal(t, longs, r.LongSucceeded+r.LongDeadLettered+r.LongUnfinished, "every long job counted once")
		require.Positive(t, r.TPMUtilisation)
	}
	for _, name := range []string{ReportFile, ThroughputFile, QueueFile, FallbackFile} {
		require.Contains(t, rep.Files, filepath.Join(out, name))
	}
	for _, name := range []string{ThroughputFile, QueueFile, FallbackFile} {
		f, err := os.Open(filepath.Join(out, name))
		require.NoError(t, err)
		cfg, err := png.DecodeConfig(f)
		f.Close()
		require.NoError(t, err, name)
		require.Greater(t, cfg.Width, 500)
	}
	md, err := os.ReadFile(filepath.Join(out, ReportFile))
	require.NoError(t, err)
	require.Contains(t, string(md), "| `adaptive` |")
	require.Contains(t, string(md), "## 3. Primary model exhausted")
	require.Contains(t, string(md), "These figures are floors")
}

// TestRunGatewayScaledDown runs the gateway load test (docs/design/gateway.md) with one call per
// agent: every call through llmq succeeds, with the deadline announced and
// as a plain SDK, and the report has its section.
func TestRunGatewayScaledDown(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the API, the worker and two simulators for about 15 s")
	}
	out := t.TempDir()
	var progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{Out: out, Scale: 0.05, Only: []string{ScenarioGateway}, Progress: &progress})
	require.NoError(t, err, progress.String())

	direct, gw := rep.Gateway.Direct, rep.Gateway.Gateway
	require.Equal(t, gatewayAgents, direct.Calls)
	failures := 0
	for _, n := range direct.Errors {
		failures += n
	}
	require.Equal(t, direct.Failures, failures, "every direct failure has a kind")
	require.Equal(t, int64(direct.Calls), direct.UpstreamCalls, "direct: one upstream call per call")
	require.Equal(t, gatewayAgents, gw.Calls)
	require.Equal(t, 0, gw.Failures, "%v", gw.Errors)
	require.Empty(t, gw.Errors)
	require.Equal(t, int64(gw.Calls)+gw.UpstreamFaults+gw.UpstreamRateLimited, gw.UpstreamCalls,
		"through llmq: one upstream call per answer, plus one retry per fault or 429")
	require.Positive(t, gw.P50)
	plain := rep.Gateway.Plain
	require.Equal(t, gatewayAgents, plain.Calls)
	require.Equal(t, 0, plain.Failures, "%v", plain.Errors)
	md, err := os.ReadFile(filepath.Join(out, ReportFile))
	require.NoError(t, err)
	require.Contains(t, string(md), "## 6. Agents on a shared, flaky endpoint")
	require.Contains(t, string(md), "| through llmq | 11 | 0 | 0.0% | none |")
	require.Contains(t, string(md), "| plain SDK through llmq | 11 | 0 | 0.0% | none |")
}

// TestRunThroughputScaledDown posts 1,000 jobs through the API and the
// worker: every one succeeds after exactly one upstream call, and the
// report has its section.
func TestRunThroughputScaledDown(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the API, the worker and a simulator for 1,000 jobs")
	}
	out := t.TempDir()
	var progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{Out: out, Scale: 0.01, Only: []string{ScenarioThroughput}, Progress: &progress})
	require.NoError(t, err, progress.String())
	tp := rep.Throughput
	require.Equal(t, 1000, tp.Jobs)
	require.Equal(t, int64(1000), tp.UpstreamCalls, "one call per job")
	require.Greater(t, tp.EndToEnd, tp.Enqueue-time.Nanosecond)
	require.Positive(t, tp.EnqueueP99)
	md, err := os.ReadFile(filepath.Join(out, ReportFile))
	require.NoError(t, err)
	require.Contains(t, string(md), "## Throughput: llmq's own overhead")
	require.Contains(t, string(md), "| memory | 1000 |")
}

// TestRunMillionScaledDown records 1,000 queued jobs (levels 10, 100 and
// 1,000) and reads every endpoint at each, with one caller and with
// several: every answer is 200, and the report has its section.
func TestRunMillionScaledDown(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the API, a worker and a simulator over a backlog")
	}
	out := t.TempDir()
	var progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{Out: out, Scale: 0.001, Only: []string{ScenarioMillion}, Progress: &progress})
	require.NoError(t, err, progress.String())
	require.Len(t, rep.Million, 3*10*2, "three levels, ten endpoints, two rounds")
	for _, r := range rep.Million {
		require.Equal(t, 20, r.Requests, "%+v", r)
		require.Positive(t, r.P99, "%+v", r)
	}
	last := rep.Million[len(rep.Million)-1]
	require.Equal(t, 1000, last.Queued)
	require.Equal(t, 200, last.Finished)
	md, err := os.ReadFile(filepath.Join(out, ReportFile))
	require.NoError(t, err)
	require.Contains(t, string(md), "## A backlog of 1,000 queued jobs: the API's reads")
	require.Contains(t, string(md), "| endpoint | 10 queued: p50 / p99 | 100 queued: p50 / p99 | 1,000 queued: p50 / p99 |")
}

// TestRunFleetScaledDown runs the fleet scenario at 1 and 2 workers on 500
// jobs each (the scenario's 1, 3 and 6 take a minute): every size has its row, with Postgres's transactions
// counted idle and loaded, and the report has its section.
func TestRunFleetScaledDown(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs an API, up to six workers and a simulator")
	}
	sizes := fleetSizes
	fleetSizes = []int{1, 2}
	t.Cleanup(func() { fleetSizes = sizes })
	out := t.TempDir()
	var progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{Out: out, Scale: 0.01, Only: []string{ScenarioFleet}, Progress: &progress})
	require.NoError(t, err, progress.String())
	require.Len(t, rep.Fleet, len(fleetSizes))
	for i, r := range rep.Fleet {
		require.Equal(t, fleetSizes[i], r.Workers)
		require.Equal(t, 500, r.Jobs)
		require.Positive(t, r.IdleXacts, "%+v", r)
		require.Greater(t, r.LoadXacts, r.IdleXacts, "%+v", r)
	}
	md, err := os.ReadFile(filepath.Join(out, ReportFile))
	require.NoError(t, err)
	require.Contains(t, string(md), "## Fleet: Postgres's load by workers")
}

// TestRunEnqueueScaledDown runs the enqueue scenario at a twentieth of its
// duration: one row per broker (in memory, RabbitMQ, kfake), each of the
// jobs its second of arrivals recorded and every called one split in
// stages, and the report's tables.
func TestRunEnqueueScaledDown(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the worker on three brokers for about 5 s")
	}
	out := t.TempDir()
	var progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{Out: out, Scale: 0.05, Only: []string{ScenarioEnqueue}, Progress: &progress})
	require.NoError(t, err, progress.String())
	require.Len(t, rep.Enqueue, 3)
	want := enqueueSpec("", "").scaled(0.05)
	for i, broker := range []string{"memory", "rabbitmq", "kfake"} {
		r := rep.Enqueue[i]
		require.Equal(t, broker, r.Broker)
		require.Equal(t, want.arrivals(want.duration), r.Jobs, "every job recorded")
		require.Positive(t, r.Called, "%s: some jobs called", broker)
		require.Positive(t, r.P99)
		require.Equal(t, uint64(r.Called), r.Stages.Jobs, "%s: every called job split in stages", broker)
		require.Len(t, r.Stages.Stages, len(firstCallStages))
		require.Positive(t, r.RecordP99)
	}
	md, err := os.ReadFile(filepath.Join(out, ReportFile))
	require.NoError(t, err)
	require.Contains(t, string(md), "## 9. Enqueue to call when the quota has room")
	require.Contains(t, string(md), "| kfake | 50 |")
	require.Contains(t, string(md), "| stage | memory p50 | memory p99 | rabbitmq p50 |")
	require.Contains(t, string(md), "| claim |")
}

// TestQuantile: a percentile of cumulative bucket counts is interpolated
// within its bucket, as histogram_quantile does; past the last finite
// bound it is that bound.
func TestQuantile(t *testing.T) {
	t.Parallel()
	cum := map[float64]uint64{0.01: 50, 0.02: 90, 0.1: 98, math.Inf(1): 100}
	require.Equal(t, 10*time.Millisecond, quantile(cum, 0.5))
	require.Equal(t, 15*time.Millisecond, quantile(cum, 0.7))
	require.Equal(t, 100*time.Millisecond, quantile(cum, 0.99), "in +Inf: the last finite bound")
	require.Zero(t, quantile(map[float64]uint64{}, 0.5))
}
