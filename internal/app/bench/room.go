package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/internal/workload"
)

// RoomRow is one run of the room scenario.
type RoomRow struct {
	// Kind is the provider's enforcement.
	Kind upstreamsim.Enforcement
	// Jobs and Succeeded count the jobs.
	Jobs, Succeeded int
	// Span is from the first call's start to the last job's result.
	Span time.Duration
	// P50 and P99 are the jobs' latencies, enqueue to result.
	P50, P99 time.Duration
	// RateLimited and Calls are the simulator's 429s and calls.
	RateLimited, Calls int64
}

// room runs the room scenario on both kinds of provider: a burst the
// provider's quota holds, which the worker should send at once where the
// provider takes it at once.
func (b *Bench) room(ctx context.Context, md *strings.Builder, rep *Report) error {
	for _, kind := range []upstreamsim.Enforcement{upstreamsim.EnforcementMinute, upstreamsim.EnforcementShort} {
		res, err := b.run(ctx, roomSpec(kind))
		if err != nil {
			return err
		}
		tot := res.stats.Total
		rep.Room = append(rep.Room, RoomRow{Kind: kind, Jobs: len(res.jobs), Succeeded: res.count(llmq.StatusSucceeded),
			Span: res.span, P50: res.latency("", 0.5), P99: res.latency("", 0.99),
			RateLimited: res.rateLimited(), Calls: tot.Accepted + res.rateLimited()})
	}
	fmt.Fprintf(md, `## 8. A burst the quota holds

%d short questions (~%d tokens charged each) land at once on an idle provider of %d RPM / %s TPM
whose latency does not grow with the calls in flight (the model configured with `+"`concurrency: %d`"+`;
shape's default, 16, holds them to 16 a round trip): its quota holds them all. *minute*: the provider enforces a bucket of one minute, full at the start,
so it would take all of them at once and the physical limit is about one call (~%s); *short*: a
bucket of %s of refill (%d requests), so the rest go at its rate. *Span* is from the first call's
start (job_attempts) to the last result.

| provider | succeeded / jobs | span | p50 | p99 | 429s / calls |
|---|---:|---:|---:|---:|---:|
`, roomJobs, sizes.Charge(workload.KindShort), RPM, kilo(roomTPM), roomConcurrency, simTTFT+time.Duration(sizes.ShortMaxTokens)*simPerToken,
		upstreamsim.ShortBucketDefault, int(upstreamsim.ShortBucketDefault.Seconds()*RPM/60))
	for _, r := range rep.Room {
		fmt.Fprintf(md, "| %s | %d / %d | %s | %s | %s | %d / %d |\n", r.Kind, r.Succeeded, r.Jobs,
			secs(r.Span), secs(r.P50), secs(r.P99), r.RateLimited, r.Calls)
	}
	md.WriteString("\n")
	return nil
}

// EnqueueResult is the enqueue scenario's run.
type EnqueueResult struct {
	// Jobs and Called count the jobs recorded and those whose call began.
	Jobs, Called int
	// P50 and P99 are the times from a job's record (created_at) to its
	// first call's start (job_attempts.started_at).
	P50, P99 time.Duration
	// RateLimited is the simulator's 429s.
	RateLimited int64
}

// enqueue runs the enqueue scenario: how soon a job recorded as the API
// records it is called, on a provider with room.
func (b *Bench) enqueue(ctx context.Context, md *strings.Builder, rep *Report) error {
	res, err := b.run(ctx, enqueueSpec())
	if err != nil {
		return err
	}
	r := &EnqueueResult{Jobs: len(res.jobs), Called: len(res.toCall), RateLimited: res.rateLimited(),
		P50: workload.Percentile(res.toCall, 0.5), P99: workload.Percentile(res.toCall, 0.99)}
	rep.Enqueue = r
	fmt.Fprintf(md, `## 9. Enqueue to call when the quota has room

A steady %d jobs/s for %s, each recorded in Postgres before its message goes to the in-memory
broker (as the API's outbox records it: the worker's ingest of the message is a duplicate), on a
provider of %s RPM / %s TPM whose latency does not grow with load. From a job's record
(`+"`created_at`"+`) to its first call's start (`+"`job_attempts.started_at`"+`):

| jobs | called | p50 | p99 | 429s |
|---|---:|---:|---:|---:|
| %d | %d | %s | %s | %d |

`, enqueueRate, enqueueRun, kilo(enqueueRPM), kilo(enqueueTPM), r.Jobs, r.Called,
		r.P50.Round(time.Millisecond), r.P99.Round(time.Millisecond), r.RateLimited)
	return nil
}
