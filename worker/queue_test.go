package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/worker"
)

// The tests of Postgres as the queue of record: leases, attempts, results,
// the ingest window, sizes and a backlog (docs/design/queue-of-record.md).

// TestWorkerLeaseRenewedWhileJobsWait: two workers on one database claim
// up to 12 s ahead of admission (ClaimHorizon) with a lease of 2.5 s, and
// each reaper sweeps every 50 ms: jobs wait for admission up to 5 times
// their lease. (The lease leaves the heartbeat, every 250 ms, room for a
// loaded machine running the race detector.) The heartbeat renews the leases, so no job is reaped and
// claimed by the other worker while it waits: one call per job.
func TestWorkerLeaseRenewedWhileJobsWait(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 31, Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: -1, TPM: -1}}})
	const n = 70
	for range 2 {
		tb.start(t, func(c *worker.Config) {
			c.Strategy = shaping.StrategyRPM
			c.Catalog.Default = llmq.Model{RPM: 30} // a burst of 30, then one every 2 s
			c.ClaimHorizon, c.Lease, c.HeartbeatInterval, c.ReapInterval = 12*time.Second, 2500*time.Millisecond,
				250*time.Millisecond, 50*time.Millisecond
		})
	}
	ids := make([]string, n)
	values := make([][]byte, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("wait-%02d", i)
		values[i] = jobJSON(ids[i], "m", "")
	}
	tb.publish(t, values...)
	recs := tb.waitTerminal(t, ids, 60*time.Second)
	for _, id := range ids {
		require.Equal(t, llmq.StatusSucceeded, recs[id].Status, id)
		require.Equal(t, 1, recs[id].Attempts, id)
	}
	require.EqualValues(t, n, tb.sim.Sim.Stats().Total.Accepted, "one call per job")
}

// TestWorkerAttemptsArePerJob: a worker died after two calls of a job
// that never answered; its lease expires, the reaper hands the job back,
// and the worker that claims it next has one call left of MaxAttempts 3:
// a 503 then dead-letters it with 3 attempts. A job claimed again with its
// attempts spent is dead-lettered without a call.
func TestWorkerAttemptsArePerJob(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 32})
	ctx := context.Background()
	for id, calls := range map[string]int{"one-left": 2, "none-left": 3} {
		j, err := llmq.Decode(jobJSON(id, "m", ""), llmq.DecodeOptions{})
		require.NoError(t, err)
		_, err = tb.store.Jobs().Insert(ctx, j)
		require.NoError(t, err)
		recs, err := tb.store.Queue().Claim(ctx, store.ClaimRequest{Model: "m", Owner: "dead", Lease: time.Millisecond, Limit: 1})
		require.NoError(t, err)
		require.Len(t, recs, 1)
		for range calls {
			_, err := tb.store.Queue().MarkCalling(ctx, recs[0].Lease(), store.PolicyState{})
			require.NoError(t, err)
		}
	}
	up := &scripted{replies: []worker.Reply{{Outcome: worker.Outcome{Class: worker.ClassRetryable, Status: 503,
		Code: "server_error", Message: "down"}}}}
	tb.start(t, func(c *worker.Config) { c.Upstream, c.MaxAttempts, c.ReapInterval = up, 3, 50*time.Millisecond })
	recs := tb.waitTerminal(t, []string{"one-left", "none-left"}, 20*time.Second)
	for _, id := range []string{"one-left", "none-left"} {
		require.Equal(t, llmq.StatusDeadLettered, recs[id].Status, id)
		require.Equal(t, 3, recs[id].Attempts, id)
	}
	require.Equal(t, []string{"m"}, up.calls(), "one call for the job with one attempt left, none for the other")
	for _, l := range tb.letters.wait(t, 2) {
		require.Equal(t, dlq.ReasonRetriesExhausted, l.Reason)
	}
}

// TestWorkerFailsAResultPostgresCannotHold: an answer holding a NUL
// character cannot be stored in jsonb: the job fails with the reason,
// once, instead of being stored again and again.
func TestWorkerFailsAResultPostgresCannotHold(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 33})
	up := &scripted{replies: []worker.Reply{{Outcome: worker.Outcome{Class: worker.ClassSuccess, Status: 200},
		Body: []byte(`{"choices":[{"message":{"content":"a\u0000b"}}]}`)}}}
	tb.start(t, func(c *worker.Config) { c.Upstream = up })
	tb.publish(t, jobJSON("nul", "m", ""))
	rec := tb.waitTerminal(t, []string{"nul"}, 20*time.Second)["nul"]
	require.Equal(t, llmq.StatusFailed, rec.Status)
	require.Equal(t, "result_unstorable", rec.ErrorCode)
	require.Contains(t, rec.ErrorMessage, "22P05")
	require.Equal(t, []string{"m"}, up.calls())
}

// TestWorkerIngestWindow: ingestion pauses while Postgres holds the ingest
// window of queued jobs, spread over two tenants each within its share
// (half): the rest of the messages stay in the broker (at most what the
// ingest loops had in hand is recorded over the window), and ingestion
// resumes once the queued jobs fall below it.
func TestWorkerIngestWindow(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 34})
	clock := clockwork.NewFakeClock()
	const window, batch, n = 6, 2, 30
	tb.start(t, func(c *worker.Config) {
		// One job a minute on the fake clock: the first is admitted, the
		// next waits in the lane, the others stay queued.
		c.Clock, c.Strategy, c.Subscriber = clock, shaping.StrategyRPM, tb.subscriber(t, batch)
		c.Catalog.Default = llmq.Model{RPM: 1}
		c.IngestWindow, c.IngestBatch = window, batch
	})
	values := make([][]byte, n)
	for i := range values {
		values[i] = jobJSON(fmt.Sprintf("w-%02d", i), "m", fmt.Sprintf(`,"tenant":"t%d"`, i%2))
	}
	tb.publish(t, values...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Both ingest loops wait on the clock, paused.
	require.NoError(t, clock.BlockUntilContext(ctx, backgroundTimers+2))
	// The window counts the queued jobs: the ones the worker claimed
	// (running) made room.
	recorded := tb.count(t, `true`)
	require.GreaterOrEqual(t, recorded, window)
	require.LessOrEqual(t, tb.count(t, `status = 'queued'`), window+2+2*batch, "soft window: over it by what the loops had in hand")
	// Read before the second count: a batch recorded between the two reads
	// leaves the broker first, so the bound holds whatever the order.
	ready := tb.ready(t)
	require.GreaterOrEqual(t, ready, int64(n-tb.count(t, `true`)-2*batch), "the overflow waits in the broker")

	// Cancelling the queued jobs makes room: ingestion resumes at the next
	// read of the count.
	_, err := tb.store.Pool().Exec(ctx, `UPDATE jobs SET status = 'cancelled', finished_at = now() WHERE status = 'queued'`)
	require.NoError(t, err)
	clock.Advance(worker.WindowRecount)
	require.Eventually(t, func() bool { return tb.count(t, `true`) > recorded }, 10*time.Second, 5*time.Millisecond)
}

// TestWorkerRunsALargeJobOfMarkup: a 600 KB job full of <, > and &: its
// encoded message is its size (nothing escaped), it is accepted, run once,
// and its body reaches the upstream byte for byte.
func TestWorkerRunsALargeJobOfMarkup(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 35, Default: upstreamsim.ModelConfig{
		Limits: upstreamsim.Limits{RPM: -1, TPM: -1}, ContextWindow: 10_000_000}})
	content := strings.Repeat("<a href=\"x\">&amp;</a> ", 600_000/22)
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false)
	require.NoError(t, enc.Encode(map[string]any{"model": "m", "max_tokens": 8,
		"messages": []map[string]string{{"role": "user", "content": content}}}))
	j := &llmq.Job{ID: "markup", Body: bytes.TrimSpace(body.Bytes())}
	require.NoError(t, j.Normalize())
	require.NoError(t, j.Validate())
	msg, err := j.Encode()
	require.NoError(t, err)
	require.Less(t, len(msg), len(j.Body)+100, "the body as it is: no HTML escaping")
	require.Greater(t, len(msg), 600_000)
	require.NoError(t, llmq.CheckSize(msg, llmq.MaxMessageBytesDefault))
	calls := &recorder{next: upstreamAt(tb.sim.URL, 30*time.Second)}
	tb.start(t, func(c *worker.Config) { c.Upstream = calls })
	tb.publish(t, msg)
	rec := tb.waitTerminal(t, []string{"markup"}, 60*time.Second)["markup"]
	require.Equal(t, llmq.StatusSucceeded, rec.Status, "%s: %s", rec.ErrorCode, rec.ErrorMessage)
	require.Len(t, calls.starts(), 1)
	var stored struct {
		Messages []struct{ Content string } `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(rec.Body, &stored))
	require.Equal(t, content, stored.Messages[0].Content)
}

// TestWorkerBacklogWaitsInPostgres: a backlog of 10,000 jobs at a quota of
// 60 RPM: every message is acked within seconds of arriving, the backlog
// waits queued in Postgres (waiting for provider quota) and at most a
// handful of jobs is running at any time.
func TestWorkerBacklogWaitsInPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 messages; skipped with -short")
	}
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 36, Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: -1, TPM: -1}}})
	sub := tb.subscriber(t, worker.IngestPrefetchDefault)
	tb.start(t, func(c *worker.Config) {
		c.Subscriber, c.Strategy, c.MaxInFlight = sub, "", worker.MaxInFlightDefault
		c.Catalog.Default = llmq.Model{RPM: 60}
	})
	const n = 10000
	values := make([][]byte, n)
	for i := range values {
		values[i] = jobJSON(fmt.Sprintf("b-%05d", i), "m", "")
	}
	start := time.Now()
	tb.publish(t, values...)
	require.Eventually(t, func() bool {
		d, err := sub.Depth(context.Background())
		return err == nil && d == 0
	}, slowdown*15*time.Second, 10*time.Millisecond, "acked")
	t.Logf("10,000 messages recorded and acked %v after the publish began", time.Since(start))
	require.Equal(t, n, tb.count(t, `true`))
	maxRunning := 0
	for range 20 {
		maxRunning = max(maxRunning, tb.count(t, `status IN ('running', 'retrying')`))
		time.Sleep(250 * time.Millisecond) // sampling the table over 5 s; not a correctness wait
	}
	t.Logf("at most %d jobs running at once", maxRunning)
	require.LessOrEqual(t, maxRunning, 3, "the backlog waits queued, not running")
	require.Greater(t, tb.count(t, `status = 'queued'`), n-100)
	rec := tb.get(t, "b-09999")
	require.Equal(t, llmq.StatusQueued, rec.Status)
	require.Equal(t, store.WaitingReasonProviderQuota, rec.WaitingReason)
}

// TestWorkerEstimatesAtIngest: the ingest records each job's shaping
// estimate, and a request for n choices without max_tokens reserves n
// default output allowances, not one.
func TestWorkerEstimatesAtIngest(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 37})
	clock := clockwork.NewFakeClock() // nothing is admitted: the jobs stay queued
	tb.start(t, func(c *worker.Config) {
		c.Clock, c.Strategy = clock, shaping.StrategyRPM
		c.Catalog.Default = llmq.Model{RPM: 1, MaxOutputDefault: 100}
	})
	tb.publish(t,
		[]byte(`{"id":"plain","body":{"model":"m","messages":[{"role":"user","content":"Hello world"}]}}`),
		[]byte(`{"id":"three","body":{"model":"m","n":3,"messages":[{"role":"user","content":"Hello world"}]}}`),
		[]byte(`{"id":"capped","body":{"model":"m","n":2,"max_tokens":7,"messages":[{"role":"user","content":"Hello world"}]}}`))
	require.Eventually(t, func() bool { return tb.count(t, `true`) == 3 }, 10*time.Second, 5*time.Millisecond)
	for id, out := range map[string]int{"plain": 100, "three": 300, "capped": 14} {
		rec := tb.get(t, id)
		require.Equal(t, 9, rec.EstPromptTokens, id) // 3 priming + 3 per message + "user" + "Hello world"
		require.Equal(t, out, rec.EstOutputTokens, id)
	}
}
