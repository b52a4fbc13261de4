package bench

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/config"
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

// EnqueueResult is one run of the enqueue scenario.
type EnqueueResult struct {
	// Broker names the broker the jobs' messages went through.
	Broker string
	// Jobs and Called count the jobs recorded and those whose call began.
	Jobs, Called int
	// P50 and P99 are the times from a job's record (created_at) to its
	// first call's start (job_attempts.started_at).
	P50, P99 time.Duration
	// WarmP50 and WarmP99 are those of the jobs recorded after the first
	// call's answer: past the lane's cold start.
	WarmP50, WarmP99 time.Duration
	// RateLimited is the simulator's 429s.
	RateLimited int64
	// Stages is the worker's split of the times to the first call;
	// RecordP50 and RecordP99 those of the jobs' record statements, from
	// their start (about created_at) to their commit.
	Stages               Stages
	RecordP50, RecordP99 time.Duration
}

// enqueue runs the enqueue scenario on each broker: how soon a job
// recorded as the API records it is called, on a provider with room.
func (b *Bench) enqueue(ctx context.Context, md *strings.Builder, rep *Report) error {
	queue := "llmq.bench.enqueue-" + uuid.NewString()[:8]
	defer b.deleteQueues(queue, queue+".rejected", queue+".dlq", queue+".dlq.rejected")
	brokers := [][2]string{
		{"memory", ""},
		{"rabbitmq", RabbitMQURLDefault + "?queue=" + queue},
		{"kfake", string(config.BrokerEmbedded)},
	}
	for _, br := range brokers {
		res, err := b.run(ctx, enqueueSpec(br[0], br[1]))
		if err != nil {
			return err
		}
		r := EnqueueResult{Broker: br[0], Jobs: len(res.jobs), Called: len(res.toCall),
			RateLimited: res.rateLimited(), P50: workload.Percentile(res.toCall, 0.5), P99: workload.Percentile(res.toCall, 0.99),
			WarmP50: workload.Percentile(res.toCallWarm, 0.5), WarmP99: workload.Percentile(res.toCallWarm, 0.99),
			Stages: res.stages, RecordP50: workload.Percentile(res.recording, 0.5), RecordP99: workload.Percentile(res.recording, 0.99)}
		rep.Enqueue = append(rep.Enqueue, r)
		fmt.Fprintf(b.cfg.Progress, "bench: %-18s to the call p50 %s p99 %s; record statement %s/%s; stages p50/p99: %s\n", "",
			roundMs(r.P50), roundMs(r.P99), roundMs(r.RecordP50), roundMs(r.RecordP99), r.Stages)
	}
	fmt.Fprintf(md, `## 9. Enqueue to call when the quota has room

A steady %d jobs/s for %s, each recorded in Postgres before its message goes to the broker (as the
API's outbox records it: the worker's ingest of the message is a duplicate), on a provider of %s
RPM / %s TPM whose latency does not grow with load (the model configured with
`+"`concurrency: %d`"+`: shape's default, 16, binds once a loaded machine stretches the calls past
320 ms); the in-memory broker, RabbitMQ (a queue of the run's own on the local server) and the
embedded Kafka (kfake). From a job's record
(`+"`created_at`"+`) to its first call's start (`+"`job_attempts.started_at`"+`), of every job and
(*warm*) of the jobs recorded after the first call's answer, past the lane's cold start (its first
call, the probe, goes with the early trial, what a second of the quota holds, and the rest wait for
its headers):

| broker | jobs | called | p50 | p99 | warm p50 | warm p99 | 429s |
|---|---:|---:|---:|---:|---:|---:|---:|
`, enqueueRate, enqueueRun, kilo(enqueueRPM), kilo(enqueueTPM), enqueueConcurrency)
	for _, r := range rep.Enqueue {
		fmt.Fprintf(md, "| %s | %d | %d | %s | %s | %s | %s | %d |\n", r.Broker, r.Jobs, r.Called,
			roundMs(r.P50), roundMs(r.P99), roundMs(r.WarmP50), roundMs(r.WarmP99), r.RateLimited)
	}
	writeStages(md, rep.Enqueue)
	return nil
}

// writeStages writes the worker's split of the times to the first call,
// a column pair per broker.
func writeStages(md *strings.Builder, rows []EnqueueResult) {
	md.WriteString(`
Where the time goes, by the worker's clock (` + "`llmq_first_call_stage_seconds`" + `, percentiles
interpolated in its buckets; each stage's own, so they do not add up to the total's): *wake*, from
the record to the wake-up of the claim round that claimed the job, or, when a round before found the
lanes without room (their concurrency, quota or a pause) or filled them, to that round; *room*, from
there to the wake-up of the round that claimed it; *round*, to that round's claim statement; *claim*, the
statement; *dispatch*, to the job in its lane's queue; *lane*, to its admission; *record*, to the
call recorded. *commit* (the bench's clock) is the record statement itself, from its start (about
` + "`created_at`" + `) to its return: about the part of *wake* before the notification is sent (after the
commit).

| stage |`)
	for _, r := range rows {
		fmt.Fprintf(md, " %s p50 | %s p99 |", r.Broker, r.Broker)
	}
	md.WriteString("\n|---|" + strings.Repeat("---:|---:|", len(rows)) + "\n")
	md.WriteString("| commit |")
	for _, r := range rows {
		fmt.Fprintf(md, " %s | %s |", roundMs(r.RecordP50), roundMs(r.RecordP99))
	}
	md.WriteString("\n")
	for i, name := range firstCallStages {
		fmt.Fprintf(md, "| %s |", name)
		for _, r := range rows {
			if i < len(r.Stages.Stages) {
				fmt.Fprintf(md, " %s | %s |", stageMs(r.Stages.Stages[i].P50), stageMs(r.Stages.Stages[i].P99))
			}
		}
		md.WriteString("\n")
	}
	md.WriteString("\nClaim rounds that claimed the jobs, woken by:")
	for _, r := range rows {
		fmt.Fprintf(md, " %s: %s.", r.Broker, r.Stages.wokenBy())
	}
	md.WriteString("\n\n")
}

// deleteQueues deletes a run's queues from the RabbitMQ server, logging
// (not failing) when it cannot.
func (b *Bench) deleteQueues(queues ...string) {
	conn, err := amqp.Dial(RabbitMQURLDefault)
	if err != nil {
		b.log.Warn("bench: delete queues", slog.Any("error", err))
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		b.log.Warn("bench: delete queues", slog.Any("error", err))
		return
	}
	defer ch.Close()
	for _, q := range queues {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			b.log.Warn("bench: delete queue", slog.String("queue", q), slog.Any("error", err))
			return // the channel is closed on an error
		}
	}
}
