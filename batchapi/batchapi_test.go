package batchapi

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/store"
)

// TestRouter: the router's decision, and the live lane's claims that
// follow it: deferrable jobs held at night (except those whose deadline is
// too near for a batch), taken in the daytime unless the live lane is
// backed up; each deferrable job the live lane takes records why.
func TestRouter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, simConfig(), nil)
	claim := func(now time.Time, drain time.Duration) map[string]*store.JobRecord {
		t.Helper()
		h := b.router.Hold(now, drain)
		recs, err := b.st.Queue().Claim(ctx, store.ClaimRequest{Model: "gpt-4o-mini", Owner: "w", Lease: time.Minute, Limit: 100,
			HoldDeferrable: h.Batch, HoldDeadlineAfter: h.DeadlineAfter, LiveReason: h.LiveReason})
		require.NoError(t, err)
		out := map[string]*store.JobRecord{}
		for _, r := range recs {
			out[r.ID] = r
		}
		return out
	}
	plain := job("plain", "gpt-4o-mini", nil)
	plain.Deferrable = false
	soon := night.Add(3 * time.Hour)
	for _, j := range []*llmq.Job{plain, job("night", "gpt-4o-mini", nil), job("soon", "gpt-4o-mini", &soon)} {
		_, err := b.st.Jobs().Insert(ctx, j)
		require.NoError(t, err)
	}

	require.Equal(t, Hold{Batch: true, DeadlineAfter: night.Add(25 * time.Hour),
		LiveReason: "live: deadline within 25h0m0s, a batch needs more"}, b.router.Hold(night, 0))
	got := claim(night, 0)
	require.Len(t, got, 2, "night: the deferrable job without a deadline is held")
	require.Empty(t, got["plain"].LaneReason, "not deferrable: no lane decision")
	require.Equal(t, "live: deadline within 25h0m0s, a batch needs more", got["soon"].LaneReason)
	held, err := b.st.Jobs().Get(ctx, llmq.DefaultTenant, "night")
	require.NoError(t, err)
	require.Equal(t, llmq.StatusQueued, held.Status)
	require.Equal(t, store.LaneLive, held.Lane)
	require.Empty(t, held.LaneReason, "undecided: the collector takes it into a batch")

	// Daytime: live unless the live lane is backed up.
	day := time.Date(2026, 6, 16, 12, 0, 0, 0, time.UTC)
	require.True(t, b.router.Hold(day, time.Hour).Batch)
	require.Empty(t, claim(day, time.Hour))
	got = claim(day, 0)
	require.Len(t, got, 1)
	require.Equal(t, "live: outside off-peak window 22:00-06:00 UTC, live lane drains in 0s", got["night"].LaneReason)
}

// TestTenThousandJobs: 10,000 deferrable jobs go through batches of at
// most 2,500 lines and each result is stored exactly once.
func TestTenThousandJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: 10,000 jobs")
	}
	t.Parallel()
	ctx := context.Background()
	b := setup(t, simConfig(), func(c *Config) { c.MaxLines = 2500 })
	start := time.Now()
	ids := b.route(t, "bulk", "gpt-4o-mini", 10000, nil)
	t.Logf("ingest of 10,000 jobs: %v", time.Since(start))
	require.Equal(t, 10000, b.count(t, `"deferrable" AND lane = 'live' AND lane_reason = '' AND status = 'queued'`))

	svc, err := New(b.cfg)
	require.NoError(t, err)
	// Due without waiting for FlushInterval: the model has MaxLines pending.
	start = time.Now()
	n, err := svc.Collector().Flush(ctx)
	require.NoError(t, err)
	require.Equal(t, 10000, n)
	t.Logf("collect, upload and create 4 batches of 2,500: %v", time.Since(start))
	require.Equal(t, 10000, b.count(t, `status = 'batched' AND lane = 'batch' AND batch_id LIKE 'lb_%'
		AND lane_reason = 'batch: inside off-peak window 22:00-06:00 UTC'`))
	batches, err := b.st.Batches().ListBatches(ctx, 10, true)
	require.NoError(t, err)
	require.Len(t, batches, 4)
	for _, bt := range batches {
		require.Equal(t, 2500, bt.JobCount)
		require.Equal(t, store.BatchValidating, bt.Status)
		require.NotEmpty(t, bt.ProviderBatchID)
	}

	// In progress: nothing to bring home yet.
	b.clock.Advance(30 * time.Second)
	ps, err := svc.Poller().Poll(ctx)
	require.NoError(t, err)
	require.Equal(t, PollStats{Polled: 4}, ps)

	b.clock.Advance(time.Hour)
	start = time.Now()
	ps, err = svc.Poller().Poll(ctx)
	require.NoError(t, err)
	require.Equal(t, PollStats{Polled: 4, Ingested: 4, Stored: 10000}, ps)
	t.Logf("download and store 10,000 results: %v", time.Since(start))
	require.Equal(t, 10000, b.count(t, `status = 'succeeded' AND result IS NOT NULL AND completion_tokens = 7 AND cost_usd > 0`))

	// Polling again changes nothing; the simulator answered each job once.
	ps, err = svc.Poller().Poll(ctx)
	require.NoError(t, err)
	require.Equal(t, PollStats{}, ps)
	stats := b.sim.Sim.Stats().Total
	require.EqualValues(t, 10000, stats.BatchLines)
	require.EqualValues(t, 0, stats.BatchLinesFailed)
	require.EqualValues(t, 0, stats.Accepted)

	// Every job's result is its own (custom_id mapping survives the
	// simulator's shuffled output).
	require.Len(t, ids, 10000)
	start = time.Now()
	b.requireOwnResults(t, 10000)
	t.Logf("check 10,000 results against a second simulator: %v", time.Since(start))

	// Cost: batch price is half the live price of the same tokens.
	c, err := CostReport(ctx, b.st.Batches(), time.Time{})
	require.NoError(t, err)
	require.Equal(t, 4, c.Batches)
	require.Equal(t, 10000, c.Jobs)
	require.InDelta(t, c.LiveCostUSD/2, c.CostUSD, 1e-9)
	require.InDelta(t, c.CostUSD, c.SavingUSD(), 1e-9)
	var sumJobs float64
	require.NoError(t, b.st.Pool().QueryRow(ctx, `SELECT sum(cost_usd) FROM jobs`).Scan(&sumJobs))
	require.InDelta(t, c.CostUSD, sumJobs, 1e-9)
	// 10,000 × (prompt × 0.15 + 7 × 0.60) / 1e6 live.
	var prompt int
	require.NoError(t, b.st.Pool().QueryRow(ctx, `SELECT sum(prompt_tokens) FROM jobs`).Scan(&prompt))
	require.InDelta(t, (float64(prompt)*0.15+70000*0.60)/1e6, c.LiveCostUSD, 1e-9)
}

// TestExpiredBatch: a batch expires halfway; the finished half is kept and
// the rest goes back to the live lane, where it is claimed from Postgres.
func TestExpiredBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sc := simConfig()
	// 100 lines at 10/s after 5s of validating, window 10s: 50 run.
	sc.Batch.LinesPerSecond = 10
	sc.Batch.CompletionWindow = 10 * time.Second
	b := setup(t, sc, nil)
	b.route(t, "exp", "gpt-4o-mini", 100, nil)
	svc, err := New(b.cfg)
	require.NoError(t, err)
	n, err := svc.Collector().FlushAll(ctx)
	require.NoError(t, err)
	require.Equal(t, 100, n)

	b.clock.Advance(time.Minute)
	ps, err := svc.Poller().Poll(ctx)
	require.NoError(t, err)
	require.Equal(t, PollStats{Polled: 1, Ingested: 1, Stored: 50, Live: 50}, ps)
	require.Equal(t, 50, b.count(t, `status = 'succeeded' AND lane = 'batch'`))
	require.Equal(t, 50, b.count(t, `status = 'queued' AND lane = 'live' AND batch_id = '' AND lane_reason LIKE '%expired%'`))

	b.liveWorker(t, 50)
	require.Equal(t, 100, b.count(t, `status = 'succeeded' AND result IS NOT NULL`))
	b.requireOwnResults(t, 100)
	require.Equal(t, 50, b.count(t, `status = 'succeeded' AND lane = 'live' AND lane_reason LIKE 'live: batch lb_% line failed: batch_expired: This request could not be executed before the completion window expired.'`))
	stats := b.sim.Sim.Stats().Total
	require.EqualValues(t, 50, stats.BatchLines)
	require.EqualValues(t, 50, stats.Succeeded)
	bt, err := b.st.Batches().ListBatches(ctx, 1, false)
	require.NoError(t, err)
	require.Equal(t, store.BatchExpired, bt[0].Status)
	require.Equal(t, 100, bt[0].RequestTotal)
	require.Equal(t, 50, bt[0].RequestCompleted)
	require.Equal(t, 50, bt[0].RequestFailed)
}

// TestRestart: the collector dies around batch creation and the poller in
// the middle of a batch; the new process finds the batch the provider
// created, submits the rest, and every job runs and is stored once.
func TestRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, simConfig(), func(c *Config) { c.MaxLines = 100 })
	b.route(t, "rs", "gpt-4o-mini", 300, nil)

	// First process: the response of the 2nd batch creation is lost and
	// the 3rd upload never leaves (the process "crashes").
	var creates, uploads int
	cut := &cutAfter{next: &http.Transport{}, match: func(r *http.Request) bool {
		switch {
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/batches"):
			creates++
			return creates == 2
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/files"):
			uploads++
			return uploads == 3
		}
		return false
	}}
	cut.cuts.Store(2)
	cfg1 := b.cfg
	cfg1.Client = newClient(t, b.sim, cut)
	svc1, err := New(cfg1)
	require.NoError(t, err)
	n, err := svc1.Collector().FlushAll(ctx)
	require.ErrorContains(t, err, "connection lost")
	require.Equal(t, 100, n)
	require.Equal(t, 100, b.count(t, `status = 'batched'`))
	require.Equal(t, 100, b.count(t, `status = 'queued' AND batch_id <> ''`))
	// The provider has 2 batches although llmq only knows one submitted.
	list, err := b.client.ListBatch(ctx, nil, nil)
	require.NoError(t, err)
	require.Len(t, list.Data, 2)

	// The poller of the first process sees the batch in progress.
	b.clock.Advance(7 * time.Second)
	ps, err := svc1.Poller().Poll(ctx)
	require.NoError(t, err)
	require.Equal(t, PollStats{Polled: 1}, ps)

	// Second process.
	svc2, err := New(b.cfg)
	require.NoError(t, err)
	n, err = svc2.Collector().Flush(ctx)
	require.NoError(t, err)
	require.Equal(t, 200, n, "adopted the lost batch and submitted the last one")
	require.Equal(t, 300, b.count(t, `status = 'batched'`))
	list, err = b.client.ListBatch(ctx, nil, nil)
	require.NoError(t, err)
	require.Len(t, list.Data, 3, "no batch submitted twice")
	seen := map[string]bool{}
	for _, pb := range list.Data {
		seen[pb.Metadata[MetadataBatchID].(string)] = true
	}
	require.Len(t, seen, 3)

	b.clock.Advance(time.Hour)
	ps, err = svc2.Poller().Poll(ctx)
	require.NoError(t, err)
	require.Equal(t, PollStats{Polled: 3, Ingested: 3, Stored: 300}, ps)
	require.Equal(t, 300, b.count(t, `status = 'succeeded' AND result IS NOT NULL`))
	b.requireOwnResults(t, 300)
	stats := b.sim.Sim.Stats().Total
	require.EqualValues(t, 300, stats.BatchLines, "each job ran once")
}

// TestInvalidBatch: a batch the provider fails at validation sends its jobs
// back to the live lane with the reason.
func TestInvalidBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sc := simConfig()
	sc.Models = map[string]upstreamsim.ModelConfig{"tiny-quota": {EnqueuedTokenLimit: 10}}
	b := setup(t, sc, nil)
	b.route(t, "inv", "tiny-quota", 20, nil)
	svc, err := New(b.cfg)
	require.NoError(t, err)
	n, err := svc.Collector().FlushAll(ctx)
	require.NoError(t, err)
	require.Equal(t, 20, n)

	b.clock.Advance(time.Minute)
	ps, err := svc.Poller().Poll(ctx)
	require.NoError(t, err)
	require.Equal(t, PollStats{Polled: 1, Ingested: 1, Live: 20}, ps)
	require.Equal(t, 20, b.count(t, `status = 'queued' AND lane = 'live' AND batch_id = ''
		AND lane_reason LIKE 'live: batch lb_% failed: token_limit_exceeded: Enqueued token limit reached for tiny-quota%'`))
	bt, err := b.st.Batches().ListBatches(ctx, 1, false)
	require.NoError(t, err)
	require.Equal(t, store.BatchFailed, bt[0].Status)
	require.Contains(t, bt[0].Error, "token_limit_exceeded")
	require.NotNil(t, bt[0].IngestedAt)

	b.liveWorker(t, 20)
	require.Equal(t, 20, b.count(t, `status = 'succeeded'`))
}

// TestDeadlinePullBack: a batched job whose deadline comes near goes back
// to the live lane; its batch runs on, and its late result is ignored.
func TestDeadlinePullBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, simConfig(), nil)
	deadline := night.Add(26 * time.Hour)
	b.route(t, "dl", "gpt-4o-mini", 5, &deadline)
	b.route(t, "free", "gpt-4o-mini", 5, nil)
	svc, err := New(b.cfg)
	require.NoError(t, err)
	n, err := svc.Collector().FlushAll(ctx)
	require.NoError(t, err)
	require.Equal(t, 10, n)

	b.setNow(t, deadline.Add(-20*time.Minute))
	ps, err := svc.Poller().Poll(ctx)
	require.NoError(t, err)
	require.Equal(t, PollStats{Polled: 1, PulledBack: 5}, ps)
	require.Equal(t, 5, b.count(t, `id LIKE 'dl-%' AND status = 'queued' AND lane = 'live' AND lane_reason = 'live: deadline too near for the batch lane, pulled back'`))
	bt, err := b.st.Batches().ListBatches(ctx, 1, true)
	require.NoError(t, err)
	require.Len(t, bt, 1, "the batch was not cancelled")

	b.clock.Advance(time.Hour)
	ps, err = svc.Poller().Poll(ctx)
	require.NoError(t, err)
	require.Equal(t, PollStats{Polled: 1, Ingested: 1, Stored: 5}, ps)
	require.Equal(t, 5, b.count(t, `id LIKE 'free-%' AND status = 'succeeded'`))
	require.Equal(t, 5, b.count(t, `id LIKE 'dl-%' AND status = 'queued' AND result IS NULL`))
	b.liveWorker(t, 5)
	require.Equal(t, 10, b.count(t, `status = 'succeeded'`))
	b.requireOwnResults(t, 10)
}

// TestCancelAndFailedLines: a cancelled batch keeps its finished results
// and sends the rest live; a line refused with a permanent error is
// dead-lettered (default policy).
func TestCancelAndFailedLines(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sc := simConfig()
	sc.Batch.LinesPerSecond = 10
	sc.Models = map[string]upstreamsim.ModelConfig{"gpt-4o-mini": {ContextWindow: 1000}}
	var letters []string
	b := setup(t, sc, func(c *Config) { c.DeadLetters = recordLetters(&letters) })
	// A body the provider refuses (over the model's context window) but
	// llmq accepts; recorded first (and first by id), it is the first line
	// of the batch.
	bad := job("a-toolong", "gpt-4o-mini", nil)
	bad.Body = []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":5000}`)
	require.NoError(t, bad.Validate())
	_, err := b.st.Jobs().Insert(ctx, bad)
	require.NoError(t, err)
	b.route(t, "ok", "gpt-4o-mini", 39, nil)

	svc, err := New(b.cfg)
	require.NoError(t, err)
	n, err := svc.Collector().FlushAll(ctx)
	require.NoError(t, err)
	require.Equal(t, 40, n)
	bt, err := b.st.Batches().ListBatches(ctx, 1, true)
	require.NoError(t, err)

	// 5s validating + 2s at 10 lines/s: 20 lines done, then cancel.
	b.clock.Advance(7 * time.Second)
	_, err = Cancel(ctx, b.st.Batches(), b.client, "nope")
	require.ErrorIs(t, err, store.ErrBatchNotFound)
	got, err := Cancel(ctx, b.st.Batches(), b.client, bt[0].ProviderBatchID)
	require.NoError(t, err)
	require.Equal(t, store.BatchCancelling, got.Status)
	b.clock.Advance(time.Minute)
	ps, err := svc.Poller().Poll(ctx)
	require.NoError(t, err)
	require.Equal(t, PollStats{Polled: 1, Ingested: 1, Stored: 19, DeadLettered: 1, Live: 20, Letters: 1}, ps)
	require.Equal(t, 20, b.count(t, `status = 'queued' AND lane = 'live' AND lane_reason LIKE 'live: batch lb_% cancelled before the job ran'`))
	got, err = b.st.Batches().GetBatch(ctx, bt[0].ID)
	require.NoError(t, err)
	require.Equal(t, store.BatchCancelled, got.Status)
	_, err = Cancel(ctx, b.st.Batches(), b.client, got.ID)
	require.ErrorIs(t, err, ErrFinished)

	j, err := b.st.Jobs().Get(ctx, llmq.DefaultTenant, "a-toolong")
	require.NoError(t, err)
	require.Equal(t, llmq.StatusDeadLettered, j.Status)
	require.Equal(t, ErrorCodeBatchLineFailed, j.ErrorCode)
	require.Contains(t, j.ErrorMessage, "http_400/context_length_exceeded")
	require.Equal(t, []string{"a-toolong"}, letters)
	require.Equal(t, 19, b.count(t, `status = 'succeeded' AND lane = 'batch'`))
	b.liveWorker(t, 20)
}

// TestService: the service's loop submits due jobs and brings the results
// home on its own; Stop ends it (twice is fine).
func TestService(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, simConfig(), func(c *Config) {
		c.Clock = clockwork.NewRealClock() // the store's clock: pending ages are compared with it
		c.Window = WindowOff
		c.Drain = func() time.Duration { return time.Hour }
		c.FlushInterval = time.Millisecond
		c.PollInterval = 10 * time.Millisecond
	})
	b.route(t, "svc", "gpt-4o-mini", 50, nil)
	svc, err := New(b.cfg)
	require.NoError(t, err)
	require.NoError(t, svc.Start(ctx))
	require.ErrorIs(t, svc.Start(ctx), ErrStarted)
	require.Eventually(t, func() bool { return b.countOrNeg(`status = 'batched'`) == 50 }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 50, b.count(t, `lane_reason = 'batch: live lane drains in 1h0m0s, over the 30m0s threshold'`))
	b.clock.Advance(time.Hour)
	require.Eventually(t, func() bool { return b.countOrNeg(`status = 'succeeded'`) == 50 }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, svc.Stop(ctx))
	require.NoError(t, svc.Stop(ctx))
	open, err := b.st.Batches().OpenBatches(ctx)
	require.NoError(t, err)
	require.Empty(t, open)
}

// TestLostBatchAndPendingDeadline: a batch the provider no longer knows
// sends its jobs live; a deferrable job whose deadline became too near for
// a batch is never submitted, and the live lane claims it.
func TestLostBatchAndPendingDeadline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, simConfig(), nil)
	b.route(t, "lost", "gpt-4o-mini", 3, nil)
	svc, err := New(b.cfg)
	require.NoError(t, err)
	n, err := svc.Collector().FlushAll(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, n)

	deadline := night.Add(30 * time.Hour)
	b.route(t, "late", "gpt-4o-mini", 2, &deadline)
	b.sim.Sim.Reset() // the provider forgets every batch
	b.setNow(t, night.Add(6*time.Hour))
	ps, err := svc.Poller().Poll(ctx)
	require.NoError(t, err)
	require.Equal(t, PollStats{Polled: 1, Ingested: 1, Live: 3}, ps)
	require.Equal(t, 3, b.count(t, `id LIKE 'lost-%' AND status = 'queued' AND lane = 'live'
		AND lane_reason LIKE 'live: batch lb_% failed: the provider has no batch batch_%'`))
	n, err = svc.Collector().FlushAll(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "the late jobs' deadline leaves no room for a batch")
	b.liveWorker(t, 5)
	require.Equal(t, 2, b.count(t, `id LIKE 'late-%' AND status = 'succeeded' AND lane = 'live'
		AND lane_reason = 'live: deadline within 25h0m0s, a batch needs more'`))
}
