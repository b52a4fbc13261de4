package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// routed claims job id as owner and hands it to the batch lane.
func (b *testBundle) routed(t *testing.T, id string) {
	t.Helper()
	_, err := b.store.Claim(b.ctx, newJob(t, id), "w1", time.Minute)
	require.NoError(t, err)
	ok, err := b.store.RouteToBatch(b.ctx, id, "w1", "batch: test")
	require.NoError(t, err)
	require.True(t, ok)
}

func TestRouteToBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.store.Claim(b.ctx, newJob(t, "r1"), "w1", time.Minute)
	require.NoError(t, err)
	// Only the lease holder may route it.
	ok, err := b.store.RouteToBatch(b.ctx, "r1", "other", "batch: x")
	require.ErrorIs(t, err, store.ErrLeased)
	require.False(t, ok)
	ok, err = b.store.RouteToBatch(b.ctx, "r1", "w1", "batch: x")
	require.NoError(t, err)
	require.True(t, ok)
	rec, err := b.store.GetByID(b.ctx, "r1")
	require.NoError(t, err)
	require.Equal(t, llmq.StatusQueued, rec.Status)
	require.Equal(t, store.LaneBatch, rec.Lane)
	require.Equal(t, "batch: x", rec.LaneReason)
	require.Equal(t, 0, rec.Attempts)
	require.Nil(t, rec.StartedAt)
	// Routing again (a second router racing) still reports it taken.
	ok, err = b.store.RouteToBatch(b.ctx, "r1", "w1", "batch: y")
	require.NoError(t, err)
	require.True(t, ok)
	// A finished job cannot be routed.
	_, err = b.store.Claim(b.ctx, newJob(t, "r2"), "w1", time.Minute)
	require.NoError(t, err)
	_, err = b.store.StoreResult(b.ctx, "r2", store.Result{Response: []byte(`{}`)})
	require.NoError(t, err)
	_, err = b.store.RouteToBatch(b.ctx, "r2", "w1", "batch: x")
	require.ErrorIs(t, err, store.ErrTerminal)
}

// TestReserveSubmitIngest walks a batch through its store life: reserve,
// a duplicate delivery claiming a reserved job, submit, ingest once.
func TestReserveSubmitIngest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := range 5 {
		b.routed(t, fmt.Sprintf("j%d", i))
		b.clock.Advance(time.Millisecond)
	}
	pending, err := b.store.PendingBatchModels(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []store.PendingModel{{Model: "big", Jobs: 5, Oldest: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}}, pending)

	// The deadline (2027-01-02) must leave room: a NotBefore after it
	// reserves nothing.
	rec, jobs, err := b.store.ReserveBatch(b.ctx, store.BatchReservation{ID: "lb_x", Model: "big", MaxJobs: 10,
		NotBefore: time.Date(2027, 2, 1, 0, 0, 0, 0, time.UTC)})
	require.NoError(t, err)
	require.Nil(t, rec)
	require.Nil(t, jobs)

	rec, jobs, err = b.store.ReserveBatch(b.ctx, store.BatchReservation{ID: "lb_1", Model: "big", MaxJobs: 4,
		Fits: func(_ store.BatchJob, accepted int) bool { return accepted < 3 }})
	require.NoError(t, err)
	require.Equal(t, store.BatchSubmitting, rec.Status)
	require.Equal(t, 3, rec.JobCount)
	require.Equal(t, []string{"j0", "j1", "j2"}, []string{jobs[0].ID, jobs[1].ID, jobs[2].ID})

	// A duplicate delivery claims reserved j1 just before submission.
	_, err = b.store.Claim(b.ctx, newJob(t, "j1"), "w2", time.Minute)
	require.NoError(t, err)
	n, err := b.store.MarkBatchSubmitted(b.ctx, store.BatchSubmission{ID: "lb_1", ProviderBatchID: "batch_p1", Status: store.BatchValidating, InputFileID: "file-1"})
	require.NoError(t, err)
	require.Equal(t, 3, n)
	_, err = b.store.MarkBatchSubmitted(b.ctx, store.BatchSubmission{ID: "lb_1", ProviderBatchID: "batch_p1", Status: store.BatchValidating})
	require.ErrorIs(t, err, store.ErrBatchNotSubmitting)
	// The worker's router then finds it batched and lets the message go.
	ok, err := b.store.RouteToBatch(b.ctx, "j1", "w2", "")
	require.NoError(t, err)
	require.True(t, ok)
	got, err := b.store.GetBatch(b.ctx, "batch_p1")
	require.NoError(t, err)
	require.Equal(t, "lb_1", got.ID)

	in := store.BatchIngest{BatchID: "lb_1",
		Results: []store.BatchResult{
			{JobID: "j0", Response: []byte(`{"id":"c0"}`), UsedModel: "big", PromptTokens: 10, CompletionTokens: 5, CostUSD: 1, LiveCostUSD: 2},
			{JobID: "j3", Response: []byte(`{"id":"c3"}`), CostUSD: 1, LiveCostUSD: 2}, // not in this batch: ignored
		},
		Live:       []store.BatchReturn{{JobID: "j1", Reason: "live: expired"}},
		DeadLetter: []store.BatchReturn{{JobID: "j2", Code: "batch_line_failed", Reason: "400"}},
	}
	st, err := b.store.IngestBatch(b.ctx, in)
	require.NoError(t, err)
	require.Equal(t, store.IngestStats{Stored: 1, Live: 1, DeadLettered: 1, CostUSD: 1, LiveCostUSD: 2}, st)
	_, err = b.store.IngestBatch(b.ctx, in)
	require.ErrorIs(t, err, store.ErrBatchIngested)

	outbox, err := b.store.Outbox(b.ctx, 10)
	require.NoError(t, err)
	require.Len(t, outbox, 2)
	byID := map[string]store.OutboxEntry{}
	for _, e := range outbox {
		byID[e.Job.ID] = e
	}
	require.Equal(t, store.OutboxRequeue, byID["j1"].Action)
	require.Equal(t, llmq.StatusQueued, byID["j1"].Job.Status)
	require.Equal(t, store.OutboxDeadLetter, byID["j2"].Action)
	require.Equal(t, llmq.StatusDeadLettered, byID["j2"].Job.Status)
	require.NoError(t, b.store.DeleteOutbox(b.ctx, []string{"j1", "j2"}))
	outbox, err = b.store.Outbox(b.ctx, 10)
	require.NoError(t, err)
	require.Empty(t, outbox)

	j0, err := b.store.GetByID(b.ctx, "j0")
	require.NoError(t, err)
	require.Equal(t, llmq.StatusSucceeded, j0.Status)
	require.JSONEq(t, `{"id":"c0"}`, string(j0.Result))
	require.Equal(t, "lb_1", j0.BatchID)
	cost, err := b.store.BatchCostSummary(b.ctx, time.Time{})
	require.NoError(t, err)
	require.Equal(t, store.BatchCost{Batches: 1, Jobs: 1, CostUSD: 1, LiveCostUSD: 2}, cost)
	require.InDelta(t, 1.0, cost.SavingUSD(), 1e-12)

	// The two jobs never reserved are still pending.
	pending, err = b.store.PendingBatchModels(b.ctx)
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.Equal(t, 2, pending[0].Jobs)
}
