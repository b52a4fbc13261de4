package bench

import (
	"fmt"
	"time"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/internal/workload"
	"github.com/llmq/llmq/shaping"
)

// The simulated provider of every scenario: RPM 600 and TPM 60,000 per
// model, so that with the long/short mix below TPM is the binding quota
// (the mix averages about 500 tokens per job: 120 jobs per minute by TPM
// against 600 by RPM).
const (
	Primary  = "gpt-4o-mini"
	Fallback = "gpt-4.1-mini"
	RPM      = 600
	TPM      = 60_000
	// Overload is the arrival rate of the strategy comparison over what
	// the binding quota serves.
	Overload = 5
)

// sizes is the long/short mix: one job in five is a 1,500-token document
// with max_tokens 500 (about 2,000 tokens charged), the others 100-token
// answers to one-line questions (about 120).
var (
	sizes = workload.Sizes{ShortMaxTokens: 100, LongPromptWords: 1500, LongMaxTokens: 500}
	mix   = workload.Mix{LongEvery: 5, Priorities: true}
)

// capacity is the jobs per second the binding quota serves with the mix.
func capacity() float64 {
	perJob := (4*float64(sizes.Charge(workload.KindShort)) + float64(sizes.Charge(workload.KindLong))) / 5
	return TPM / perJob / 60
}

// simConfig is a simulator with the given limits per model. Completions
// are exactly max_tokens long, so the tokens served equal the tokens
// charged at admission and the utilisation of TPM is exact. Latency: 100 ms
// to the first token and 1 ms per token, slowing down above 32 requests in
// flight (the congestion signal of the adaptive strategy).
// The simulator's latency: to the first token, then per token.
const (
	simTTFT     = 100 * time.Millisecond
	simPerToken = time.Millisecond
)

func simConfig(models map[string]upstreamsim.Limits) upstreamsim.Config {
	c := upstreamsim.Config{
		Models:  map[string]upstreamsim.ModelConfig{},
		Latency: upstreamsim.LatencyConfig{TTFT: simTTFT, PerToken: simPerToken, Capacity: 32},
		Output:  upstreamsim.OutputConfig{Distribution: upstreamsim.DistFixed, Min: 1, Max: 1 << 20, Mean: 1 << 20},
		Seed:    7,
	}
	for name, l := range models {
		c.Models[name] = upstreamsim.ModelConfig{Limits: l}
	}
	return c
}

func known(fallbacks ...string) llmq.Model {
	return llmq.Model{RPM: RPM, TPM: TPM, Fallbacks: fallbacks}
}

// strategyRun is the length of one strategy's run; steadyFrom is where its
// steady state is taken to begin (the provider's initial full bucket is
// spent by then).
const (
	strategyRun = 40 * time.Second
	steadyFrom  = 20 * time.Second
)

// strategySpec is the comparison of docs/design/rate-limiting.md: arrivals at Overload times the
// capacity for the whole 40 s run, so every strategy stays backlogged.
func strategySpec(st shaping.Strategy) spec {
	return spec{
		name: string(st), strategy: st,
		sim:    simConfig(map[string]upstreamsim.Limits{Primary: {RPM: RPM, TPM: TPM}}),
		models: map[string]llmq.Model{Primary: known()},
		model:  Primary, mix: mix, sizes: sizes,
		load:     []phase{{until: strategyRun, rate: Overload * capacity()}},
		duration: strategyRun,
	}
}

// Burst scenario timing: steady at half the capacity, five times that for
// 10 s, then steady again.
const (
	burstStart = 10 * time.Second
	burstEnd   = 20 * time.Second
	burstRun   = 55 * time.Second
	burstRatio = 5
)

func burstSteady() float64 { return capacity() / 2 }

// burstSpec is the first acceptance experiment of docs/design/quotas.md with the default
// strategy (shape, quota known).
func burstSpec() spec {
	steady := burstSteady()
	return spec{
		name: "burst", strategy: shaping.StrategyShape,
		sim:    simConfig(map[string]upstreamsim.Limits{Primary: {RPM: RPM, TPM: TPM}}),
		models: map[string]llmq.Model{Primary: known()},
		model:  Primary, mix: mix, sizes: sizes,
		load: []phase{
			{until: burstStart, rate: steady},
			{until: burstEnd, rate: burstRatio * steady},
			{until: burstRun, rate: steady},
		},
		duration: burstRun,
	}
}

// The primary of the fallback scenario allows primaryConcurrency calls in
// flight, and as many other clients (on the same key) keep a call of
// hogMaxTokens in flight each, all the time.
const (
	primaryConcurrency = 4
	hogMaxTokens       = 1000
)

// fallbackSpec is the fourth experiment of docs/design/quotas.md: other clients exhaust the
// primary (its concurrency, then its TPM), and the jobs name a fallback
// model with quota to spare.
func fallbackSpec() spec {
	return spec{
		name: "fallback", strategy: shaping.StrategyShape,
		sim: simConfig(map[string]upstreamsim.Limits{
			Primary:  {RPM: RPM, TPM: TPM, MaxConcurrency: primaryConcurrency},
			Fallback: {RPM: RPM, TPM: TPM},
		}),
		models:    map[string]llmq.Model{Primary: known(), Fallback: known()},
		model:     Primary,
		fallbacks: []string{Fallback},
		hogs:      primaryConcurrency,
		mix:       mix, sizes: sizes,
		load:     []phase{{until: 15 * time.Second, rate: capacity()}},
		duration: 35 * time.Second,
	}
}

// Adaptive scenario timing: the limit halves at adaptiveChange.
const (
	adaptiveChange = 35 * time.Second
	adaptiveRun    = 75 * time.Second
)

// adaptiveSpec runs the adaptive strategy with no quota configured at
// twice the capacity while the provider halves TPM (and RPM) mid-run; the
// provider sends the x-ratelimit-* headers or, with headers
// upstreamsim.HeadersNone, none at all.
func adaptiveSpec(headers upstreamsim.HeaderMode) spec {
	sim := simConfig(map[string]upstreamsim.Limits{Primary: {RPM: RPM, TPM: TPM}})
	sim.RateLimitHeaders = headers
	return spec{
		name: "adaptive-halving-headers-" + string(headers), strategy: shaping.StrategyAdaptive,
		sim:    sim,
		models: map[string]llmq.Model{},
		model:  Primary, mix: mix, sizes: sizes,
		load: []phase{{until: adaptiveRun, rate: 2 * capacity()}},
		events: []event{{at: adaptiveChange, what: "limits halve", do: func(s *upstreamsim.Server) {
			s.SetLimits(Primary, upstreamsim.Limits{RPM: RPM / 2, TPM: TPM / 2})
		}}},
		duration: adaptiveRun,
	}
}

// The backlog scenario: backlogJobs jobs, one in five a ~3,000
// token document, land at once on an idle provider whose bucket is full;
// the run ends when every job is terminal (at most backlogRun).
const (
	backlogJobs = 200
	backlogRun  = 5 * time.Minute
)

// backlogSizes: a long job charges about 3,000 tokens, a short one 120.
var backlogSizes = workload.Sizes{ShortMaxTokens: 100, LongPromptWords: 2500, LongMaxTokens: 500}

// backlogSpec runs the backlog with replicas workers (sharing the quota
// through the ledger) against a provider enforcing per minute or over a
// short bucket (upstreamsim.ShortBucketDefault of refill).
func backlogSpec(kind upstreamsim.Enforcement, replicas int) spec {
	sim := simConfig(map[string]upstreamsim.Limits{Primary: {RPM: RPM, TPM: TPM}})
	sim.Enforcement = kind
	return spec{
		name: fmt.Sprintf("backlog-%s-x%d", kind, replicas), strategy: shaping.StrategyShape,
		sim: sim, models: map[string]llmq.Model{Primary: known()},
		model: Primary, mix: mix, sizes: backlogSizes,
		backlog: backlogJobs, replicas: replicas, untilDone: true,
		duration: backlogRun,
	}
}

// physicalLimit is the least time a provider of kind can take to serve
// tokens: what its bucket holds at once (a minute of TPM, or the short
// bucket's seconds of refill), then its refill, plus one call (the last
// one's answer).
func physicalLimit(kind upstreamsim.Enforcement, tokens float64) time.Duration {
	bucket := float64(TPM)
	if kind == upstreamsim.EnforcementShort {
		bucket = upstreamsim.ShortBucketDefault.Seconds() * TPM / 60
	}
	call := simTTFT + time.Duration(backlogSizes.LongMaxTokens)*simPerToken
	return time.Duration(max(0, tokens-bucket)/(TPM/60)*float64(time.Second)) + call
}

// The room scenario: roomJobs short questions land at once on an idle
// provider (of ample capacity) whose quota holds them all (roomTPM is far above their tokens, and
// roomJobs is under the RPM), so nothing but the client keeps them waiting:
// the physical limit is about one call.
const (
	roomJobs = 180
	roomTPM  = 1_000_000
	roomRun  = time.Minute
	// roomConcurrency is the model's configured concurrency: the
	// provider's room for calls in flight (shape's default, 16, would hold
	// 180 calls to 16 a round trip).
	roomConcurrency = 256
)

// roomSpec runs the room scenario against a provider enforcing per minute or
// over a short bucket (which holds upstreamsim.ShortBucketDefault of refill,
// fewer requests than roomJobs).
func roomSpec(kind upstreamsim.Enforcement) spec {
	sim := simConfig(map[string]upstreamsim.Limits{Primary: {RPM: RPM, TPM: roomTPM}})
	sim.Enforcement = kind
	// An idle provider of ample capacity: its latency does not grow with
	// the calls in flight, so the physical limit is one call.
	sim.Latency.Capacity = 0
	return spec{
		name: fmt.Sprintf("room-%s", kind), strategy: shaping.StrategyShape,
		sim: sim, models: map[string]llmq.Model{Primary: {RPM: RPM, TPM: roomTPM, Concurrency: roomConcurrency}},
		model: Primary, mix: workload.Mix{}, sizes: sizes,
		backlog: roomJobs, untilDone: true,
		duration: roomRun,
	}
}

// The enqueue scenario: a steady enqueueRate jobs per second, each recorded
// before its message is sent (as the API's outbox does, so the worker's
// ingest of it is a duplicate), on a provider with room for all of them.
const (
	enqueueRate = 50
	enqueueRun  = 20 * time.Second
	enqueueRPM  = 60_000
	enqueueTPM  = 10_000_000
	// enqueueConcurrency is the model's configured concurrency, room for
	// every call: shape's default, 16, is 50 jobs/s of calls of 320 ms,
	// which a loaded machine reaches (the simulator's own are 200 ms), and
	// the jobs then wait in Postgres for the lane's room, not for a claim.
	enqueueConcurrency = 256
)

// enqueueSpec is the enqueue scenario over broker, named kind ("" = the
// in-memory broker).
func enqueueSpec(kind, broker string) spec {
	sim := simConfig(map[string]upstreamsim.Limits{Primary: {RPM: enqueueRPM, TPM: enqueueTPM}})
	sim.Latency.Capacity = 0
	return spec{
		name: "enqueue-" + kind, strategy: shaping.StrategyShape, broker: broker,
		sim: sim, models: map[string]llmq.Model{Primary: {RPM: enqueueRPM, TPM: enqueueTPM, Concurrency: enqueueConcurrency}},
		model: Primary, mix: workload.Mix{}, sizes: sizes,
		load:     []phase{{until: enqueueRun, rate: enqueueRate}},
		duration: enqueueRun + 5*time.Second,
	}
}
