package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/shaping"
)

// LearnRow is one run of the learn scenario.
type LearnRow struct {
	// Kind is the provider's enforcement; Headers whether its answers
	// carry the x-ratelimit-* headers.
	Kind    upstreamsim.Enforcement
	Headers upstreamsim.HeaderMode
	// Jobs and Succeeded count the jobs; Makespan, Physical as in
	// BacklogRow.
	Jobs, Succeeded    int
	Makespan, Physical time.Duration
	// RateLimited and Calls are the simulator's 429s and calls.
	RateLimited, Calls int64
}

// learnSpec is the backlog of backlogSpec with no quota configured (the
// default strategy then, adaptive): the lane learns the quota from the
// headers of a provider enforcing kind, or from its 429s alone.
func learnSpec(kind upstreamsim.Enforcement, headers upstreamsim.HeaderMode) spec {
	s := backlogSpec(kind, 1)
	s.name = fmt.Sprintf("learn-%s-headers-%s", kind, headers)
	s.sim.RateLimitHeaders = headers
	s.strategy = shaping.DefaultStrategy(0, 0)
	s.models = map[string]llmq.Model{}
	return s
}

// learn runs the backlog with no quota configured on a short-bucket
// provider with headers and on a minute one without any.
func (b *Bench) learn(ctx context.Context, md *strings.Builder, rep *Report) error {
	for _, c := range []struct {
		kind    upstreamsim.Enforcement
		headers upstreamsim.HeaderMode
	}{{upstreamsim.EnforcementShort, upstreamsim.HeadersAll}, {upstreamsim.EnforcementMinute, upstreamsim.HeadersNone}} {
		res, err := b.run(ctx, learnSpec(c.kind, c.headers))
		if err != nil {
			return err
		}
		tot := res.stats.Total
		rep.Learn = append(rep.Learn, LearnRow{Kind: c.kind, Headers: c.headers, Jobs: len(res.jobs),
			Succeeded: res.count(llmq.StatusSucceeded), Makespan: res.latency("", 1),
			Physical:    physicalLimit(c.kind, float64(tot.PromptTokens+tot.CompletionTokens)),
			RateLimited: res.rateLimited(), Calls: tot.Accepted + res.rateLimited()})
	}
	fmt.Fprintf(md, `## 10. Learning the quota without paying for it

The backlog of section 5 (%d jobs at once, one worker) with **no quota configured** (the default
strategy then, %s): on a provider enforcing its %d RPM / %s TPM over a short bucket (%s of refill)
with its rate-limit headers, and on one enforcing per minute that sends no rate-limit header at all
(its 429s keep their `+"`Retry-After`"+`). Goals: at most one 429 per 200 jobs on the short bucket,
at most 2%% on the provider without headers.

| provider | headers | succeeded / jobs | makespan | physical limit | 429s / calls |
|---|---|---:|---:|---:|---:|
`, backlogJobs, shaping.DefaultStrategy(0, 0), RPM, kilo(TPM), upstreamsim.ShortBucketDefault)
	for _, r := range rep.Learn {
		fmt.Fprintf(md, "| %s | %s | %d / %d | %s | %s | %d / %d |\n", r.Kind, r.Headers, r.Succeeded, r.Jobs,
			secs(r.Makespan), secs(r.Physical), r.RateLimited, r.Calls)
	}
	md.WriteString("\n")
	return nil
}
