package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// TestPredictCompletion: the prediction counts the model's jobs queued at
// the call's priority or higher and in flight, at the rates of the live
// lanes summed over the workers; with no rate known it is unknown, and
// nothing is counted.
func TestPredictCompletion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i, prio := range []string{"high", "normal", "normal", "low", "low", "low"} {
		j, err := llmq.Decode([]byte(fmt.Sprintf(`{"id":"j-%d","tenant":"acme","priority":%q,
			"body":{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":10}}`, i, prio)), llmq.DecodeOptions{})
		require.NoError(t, err)
		_, err = b.store.Jobs().Insert(b.ctx, j)
		require.NoError(t, err)
	}
	other := newJob(t, "other-model") // model "big": not counted
	_, err := b.store.Jobs().Insert(b.ctx, other)
	require.NoError(t, err)
	held, err := b.store.Queue().Claim(b.ctx, store.ClaimRequest{Model: "m", Owner: "w", Lease: time.Hour, Limit: 1})
	require.NoError(t, err)
	require.Len(t, held, 1) // the high job runs

	p, err := b.store.LaneRates().PredictCompletion(b.ctx, "m", llmq.PriorityNormal, 20)
	require.NoError(t, err)
	require.False(t, p.Known, "no lane row")
	require.Zero(t, p.Wait)
	require.Zero(t, p.Ahead, "not counted")

	// Only a concurrency: still unknown.
	require.NoError(t, b.store.LaneRates().SetLaneRates(b.ctx, "w1", []store.LaneRate{{Model: "m", Concurrency: 4, Latency: time.Second}}))
	p, err = b.store.LaneRates().PredictCompletion(b.ctx, "m", llmq.PriorityNormal, 20)
	require.NoError(t, err)
	require.False(t, p.Known)

	// Two workers at 30 and 30 RPM: 60 RPM, 1 s a request.
	require.NoError(t, b.store.LaneRates().SetLaneRates(b.ctx, "w1", []store.LaneRate{{Model: "m", RequestsPerMin: 30, Concurrency: 2, InFlight: 1, Latency: 500 * time.Millisecond}}))
	require.NoError(t, b.store.LaneRates().SetLaneRates(b.ctx, "w2", []store.LaneRate{{Model: "m", RequestsPerMin: 30, Concurrency: 2, Latency: 1500 * time.Millisecond}}))
	p, err = b.store.LaneRates().PredictCompletion(b.ctx, "m", llmq.PriorityLow, 20)
	require.NoError(t, err)
	require.True(t, p.Known)
	require.Equal(t, int64(5), p.Ahead, "normal and low jobs queued ahead of a low call")
	require.Equal(t, int64(1), p.InFlight)
	require.Equal(t, 60.0, p.RequestsPerMin)
	require.Equal(t, int64(4), p.Concurrency)
	require.Equal(t, time.Second, p.Latency)
	// The buckets hold a minute's 60 requests: the 5 go at once, 4 calls
	// at a time, (5+1+1-4)/4 x 1 s; then the call's 1 s.
	require.Equal(t, 1750*time.Millisecond, p.Wait)
	// The last minute's 60 calls spent the buckets: 5 requests at 1 s
	// each; the concurrency's wait is less; then the call's 1 s.
	_, err = b.store.Pool().Exec(b.ctx, `INSERT INTO job_attempts (tenant, job_id, seq, attempt, model, started_at,
			prompt_tokens, completion_tokens)
		SELECT 'acme', 'spent-' || i, 1, 1, 'm', $1, 10, 10 FROM generate_series(1, 60) i`, b.clock.Now().Add(-30*time.Second))
	require.NoError(t, err)
	p, err = b.store.LaneRates().PredictCompletion(b.ctx, "m", llmq.PriorityLow, 20)
	require.NoError(t, err)
	require.Equal(t, int64(60), p.RecentRequests)
	require.Equal(t, int64(1200), p.RecentTokens)
	require.Equal(t, 6*time.Second, p.Wait)
	p, err = b.store.LaneRates().PredictCompletion(b.ctx, "m", llmq.PriorityHigh, 20)
	require.NoError(t, err)
	require.Equal(t, int64(0), p.Ahead)
	require.Equal(t, time.Second, p.Wait)

	// A row LaneRateTTL old is a stopped worker's.
	b.clock.Advance(store.LaneRateTTL)
	p, err = b.store.LaneRates().PredictCompletion(b.ctx, "m", llmq.PriorityLow, 20)
	require.NoError(t, err)
	require.False(t, p.Known)
}

// TestPredictTenantShare: a tenant's call waits for its own jobs ahead
// and, of another tenant's backlog, for what the fair share gives that
// tenant meanwhile (its weight's part of the call's turn), not for the
// whole backlog; without a tenant the whole queue is ahead.
func TestPredictTenantShare(t *testing.T) {
	t.Parallel()
	b := setup(t)
	insert := func(tenant string, n int, prio string) {
		for i := range n {
			j, err := llmq.Decode([]byte(fmt.Sprintf(`{"id":"%s-%s-%d","tenant":%q,"priority":%q,
				"body":{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":10}}`, tenant, prio, i, tenant, prio)),
				llmq.DecodeOptions{})
			require.NoError(t, err)
			_, err = b.store.Jobs().Insert(b.ctx, j)
			require.NoError(t, err)
		}
	}
	// Recorded without an estimate: each job counts the call's 20 tokens.
	insert("small", 1, "normal")
	insert("big", 50, "low") // between tenants the claim takes turns, whatever the priority
	require.NoError(t, b.store.LaneRates().SetLaneRates(b.ctx, "w", []store.LaneRate{{Model: "m", RequestsPerMin: 60, TokensPerMin: 6000}}))
	// The last minute's calls spent the buckets (jobs of another model's
	// tenant: not queued here).
	_, err := b.store.Pool().Exec(b.ctx, `INSERT INTO job_attempts (tenant, job_id, seq, attempt, model, started_at,
			prompt_tokens, completion_tokens)
		SELECT 'x', 'spent-' || i, 1, 1, 'm', $1, 50, 50 FROM generate_series(1, 60) i`, b.clock.Now().Add(-30*time.Second))
	require.NoError(t, err)

	req := store.PredictRequest{Model: "m", Priority: llmq.PriorityNormal, Tokens: 20, Tenant: "small"}
	p, err := b.store.LaneRates().Predict(b.ctx, req)
	require.NoError(t, err)
	// small's turn: its job and the call, 40 tokens; big gets as much, 2 jobs.
	require.Equal(t, int64(3), p.Ahead)
	require.Equal(t, int64(60), p.AheadTokens)
	require.Equal(t, 3*time.Second, p.Wait, "3 requests at 60 a minute")

	// big weighs 3: 120 tokens of it meanwhile, 6 jobs.
	req.Weight = llmq.Tenants{"big": {Scope: llmq.Scope{Weight: 3}}}.Weight
	p, err = b.store.LaneRates().Predict(b.ctx, req)
	require.NoError(t, err)
	require.Equal(t, int64(7), p.Ahead)
	require.Equal(t, int64(140), p.AheadTokens)

	// big's own call is behind all of its jobs at low or higher, and
	// small's one job (less than its turn).
	p, err = b.store.LaneRates().Predict(b.ctx, store.PredictRequest{Model: "m", Priority: llmq.PriorityLow, Tokens: 20, Tenant: "big"})
	require.NoError(t, err)
	require.Equal(t, int64(51), p.Ahead)

	// No tenant: the whole queue at normal or higher, as before tenants.
	p, err = b.store.LaneRates().PredictCompletion(b.ctx, "m", llmq.PriorityLow, 20)
	require.NoError(t, err)
	require.Equal(t, int64(51), p.Ahead)
	p, err = b.store.LaneRates().PredictCompletion(b.ctx, "m", llmq.PriorityNormal, 20)
	require.NoError(t, err)
	require.Equal(t, int64(1), p.Ahead)
}
