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
		_, err = b.store.Insert(b.ctx, j)
		require.NoError(t, err)
	}
	other := newJob(t, "other-model") // model "big": not counted
	_, err := b.store.Insert(b.ctx, other)
	require.NoError(t, err)
	held, err := b.store.Claim(b.ctx, store.ClaimRequest{Model: "m", Owner: "w", Lease: time.Hour, Limit: 1})
	require.NoError(t, err)
	require.Len(t, held, 1) // the high job runs

	p, err := b.store.PredictCompletion(b.ctx, "m", llmq.PriorityNormal, 20)
	require.NoError(t, err)
	require.False(t, p.Known, "no lane row")
	require.Zero(t, p.Wait)
	require.Zero(t, p.Ahead, "not counted")

	// Only a concurrency: still unknown.
	require.NoError(t, b.store.SetLaneRates(b.ctx, "w1", []store.LaneRate{{Model: "m", Concurrency: 4, Latency: time.Second}}))
	p, err = b.store.PredictCompletion(b.ctx, "m", llmq.PriorityNormal, 20)
	require.NoError(t, err)
	require.False(t, p.Known)

	// Two workers at 30 and 30 RPM: 60 RPM, 1 s a request.
	require.NoError(t, b.store.SetLaneRates(b.ctx, "w1", []store.LaneRate{{Model: "m", RequestsPerMin: 30, Concurrency: 2, InFlight: 1, Latency: 500 * time.Millisecond}}))
	require.NoError(t, b.store.SetLaneRates(b.ctx, "w2", []store.LaneRate{{Model: "m", RequestsPerMin: 30, Concurrency: 2, Latency: 1500 * time.Millisecond}}))
	p, err = b.store.PredictCompletion(b.ctx, "m", llmq.PriorityLow, 20)
	require.NoError(t, err)
	require.True(t, p.Known)
	require.Equal(t, int64(5), p.Ahead, "normal and low jobs queued ahead of a low call")
	require.Equal(t, int64(1), p.InFlight)
	require.Equal(t, 60.0, p.RequestsPerMin)
	require.Equal(t, int64(4), p.Concurrency)
	require.Equal(t, time.Second, p.Latency)
	// 5 requests at 1 s each; the concurrency's (5+1+1-4)/4 x 1 s is less;
	// then the call's 1 s.
	require.Equal(t, 6*time.Second, p.Wait)
	p, err = b.store.PredictCompletion(b.ctx, "m", llmq.PriorityHigh, 20)
	require.NoError(t, err)
	require.Equal(t, int64(0), p.Ahead)
	require.Equal(t, time.Second, p.Wait)

	// A row LaneRateTTL old is a stopped worker's.
	b.clock.Advance(store.LaneRateTTL)
	p, err = b.store.PredictCompletion(b.ctx, "m", llmq.PriorityLow, 20)
	require.NoError(t, err)
	require.False(t, p.Known)
}
