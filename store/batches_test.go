package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// deferrable records a deferrable job id whose lane nobody decided yet.
func (b *testBundle) deferrable(t *testing.T, id string) {
	t.Helper()
	j := newJob(t, id)
	j.Deferrable = true
	_, err := b.store.Jobs().Insert(b.ctx, j)
	require.NoError(t, err)
}

func acme(id string) store.Key { return store.Key{Tenant: "acme", ID: id} }

// TestReserveSubmitIngest walks a batch through its store life: the batch
// lane takes undecided deferrable jobs, reserves, submits, ingests once.
func TestReserveSubmitIngest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := range 5 {
		b.deferrable(t, fmt.Sprintf("j%d", i))
		b.clock.Advance(time.Millisecond)
	}
	_, err := b.store.Jobs().Insert(b.ctx, newJob(t, "not-deferrable"))
	require.NoError(t, err)
	held := store.BatchCandidates{Undecided: true}
	pending, err := b.store.Batches().PendingBatchModels(b.ctx, store.BatchCandidates{})
	require.NoError(t, err)
	require.Empty(t, pending, "no job is in the batch lane until it takes undecided ones")
	pending, err = b.store.Batches().PendingBatchModels(b.ctx, held)
	require.NoError(t, err)
	require.Equal(t, []store.PendingModel{{Model: "big", Jobs: 5, Oldest: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}}, pending)

	// The deadline (2027-01-02) must leave room: a NotBefore after it
	// reserves nothing.
	rec, jobs, err := b.store.Batches().ReserveBatch(b.ctx, store.BatchReservation{ID: "lb_x", Model: "big", MaxJobs: 10,
		Candidates: store.BatchCandidates{Undecided: true, NotBefore: time.Date(2027, 2, 1, 0, 0, 0, 0, time.UTC)}})
	require.NoError(t, err)
	require.Nil(t, rec)
	require.Nil(t, jobs)

	rec, jobs, err = b.store.Batches().ReserveBatch(b.ctx, store.BatchReservation{ID: "lb_1", Model: "big", MaxJobs: 4,
		Candidates: held, Reason: "batch: off-peak",
		Fits: func(_ store.BatchJob, accepted int) bool { return accepted < 3 }})
	require.NoError(t, err)
	require.Equal(t, store.BatchSubmitting, rec.Status)
	require.Equal(t, 3, rec.JobCount)
	require.Equal(t, []store.Key{acme("j0"), acme("j1"), acme("j2")}, []store.Key{jobs[0].Key, jobs[1].Key, jobs[2].Key})
	j1 := b.get(t, "j1")
	require.Equal(t, llmq.StatusQueued, j1.Status)
	require.Equal(t, store.LaneBatch, j1.Lane)
	require.Equal(t, "batch: off-peak", j1.LaneReason)
	require.Equal(t, "lb_1", j1.BatchID)
	recs, err := b.store.Queue().Claim(b.ctx, store.ClaimRequest{Model: "big", Owner: "w", Lease: time.Minute, Limit: 10,
		HoldDeferrable: true})
	require.NoError(t, err)
	require.Len(t, recs, 1, "the live lane takes neither reserved nor held jobs")
	require.Equal(t, "not-deferrable", recs[0].ID)

	n, err := b.store.Batches().MarkBatchSubmitted(b.ctx, store.BatchSubmission{ID: "lb_1", ProviderBatchID: "batch_p1", Status: store.BatchValidating, InputFileID: "file-1"})
	require.NoError(t, err)
	require.Equal(t, 3, n)
	_, err = b.store.Batches().MarkBatchSubmitted(b.ctx, store.BatchSubmission{ID: "lb_1", ProviderBatchID: "batch_p1", Status: store.BatchValidating})
	require.ErrorIs(t, err, store.ErrBatchNotSubmitting)
	got, err := b.store.Batches().GetBatch(b.ctx, "batch_p1")
	require.NoError(t, err)
	require.Equal(t, "lb_1", got.ID)
	keys, err := b.store.Batches().BatchJobKeys(b.ctx, "lb_1", llmq.StatusBatched)
	require.NoError(t, err)
	require.Equal(t, []store.Key{acme("j0"), acme("j1"), acme("j2")}, keys)

	in := store.BatchIngest{BatchID: "lb_1",
		Results: []store.BatchResult{
			{Job: acme("j0"), Response: []byte(`{"id":"c0"}`), UsedModel: "big", PromptTokens: 10, CompletionTokens: 5, CostUSD: 1, LiveCostUSD: 2},
			{Job: acme("j3"), Response: []byte(`{"id":"c3"}`), CostUSD: 1, LiveCostUSD: 2}, // not in this batch: ignored
		},
		Live:       []store.BatchReturn{{Job: acme("j1"), Reason: "live: expired"}},
		DeadLetter: []store.BatchReturn{{Job: acme("j2"), Code: "batch_line_failed", Reason: "400"}},
	}
	st, err := b.store.Batches().IngestBatch(b.ctx, in)
	require.NoError(t, err)
	require.Equal(t, store.IngestStats{Stored: 1, Live: 1, DeadLettered: 1, CostUSD: 1, LiveCostUSD: 2}, st)
	_, err = b.store.Batches().IngestBatch(b.ctx, in)
	require.ErrorIs(t, err, store.ErrBatchIngested)

	outbox, err := b.store.Batches().Outbox(b.ctx, 10)
	require.NoError(t, err)
	require.Len(t, outbox, 1, "only the dead letter needs a message")
	require.Equal(t, store.OutboxDeadLetter, outbox[0].Action)
	require.Equal(t, "j2", outbox[0].Job.ID)
	require.Equal(t, llmq.StatusDeadLettered, outbox[0].Job.Status)
	require.NoError(t, b.store.Batches().DeleteOutbox(b.ctx, []store.Key{acme("j2")}))
	outbox, err = b.store.Batches().Outbox(b.ctx, 10)
	require.NoError(t, err)
	require.Empty(t, outbox)

	// The job handed back is claimed from Postgres by the live lane.
	j1 = b.get(t, "j1")
	require.Equal(t, llmq.StatusQueued, j1.Status)
	require.Equal(t, store.LaneLive, j1.Lane)
	recs, err = b.store.Queue().Claim(b.ctx, store.ClaimRequest{Model: "big", Owner: "w", Lease: time.Minute, Limit: 1,
		HoldDeferrable: true})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, "j1", recs[0].ID)

	j0 := b.get(t, "j0")
	require.Equal(t, llmq.StatusSucceeded, j0.Status)
	require.JSONEq(t, `{"id":"c0"}`, string(j0.Result))
	require.Equal(t, "lb_1", j0.BatchID)
	cost, err := b.store.Batches().BatchCostSummary(b.ctx, time.Time{})
	require.NoError(t, err)
	require.Equal(t, store.BatchCost{Batches: 1, Jobs: 1, CostUSD: 1, LiveCostUSD: 2}, cost)
	require.InDelta(t, 1.0, cost.SavingUSD(), 1e-12)

	// The two jobs never reserved are still undecided.
	pending, err = b.store.Batches().PendingBatchModels(b.ctx, held)
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.Equal(t, 2, pending[0].Jobs)
}

// TestAbandonBatch: a batch the provider refused goes back to the batch
// lane's pool, or to the live lane.
func TestAbandonBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deferrable(t, "a")
	_, _, err := b.store.Batches().ReserveBatch(b.ctx, store.BatchReservation{ID: "lb_1", Model: "big", MaxJobs: 10,
		Candidates: store.BatchCandidates{Undecided: true}, Reason: "batch: test"})
	require.NoError(t, err)
	n, err := b.store.Batches().AbandonBatch(b.ctx, "lb_1", "upload refused", false, "")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	pending, err := b.store.Batches().PendingBatchModels(b.ctx, store.BatchCandidates{})
	require.NoError(t, err)
	require.Len(t, pending, 1, "back in the batch lane's pool")

	_, _, err = b.store.Batches().ReserveBatch(b.ctx, store.BatchReservation{ID: "lb_2", Model: "big", MaxJobs: 10})
	require.NoError(t, err)
	n, err = b.store.Batches().AbandonBatch(b.ctx, "lb_2", "refused", true, "live: refused")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	a := b.get(t, "a")
	require.Equal(t, store.LaneLive, a.Lane)
	require.Equal(t, "live: refused", a.LaneReason)
	require.Len(t, b.hold(t, "w"), 1, "claimed by the live lane")
}

// TestBatchOrder: the batch lane takes its jobs in the order they were
// recorded, whatever happened to them since: a job handed back by a batch
// that never reached the provider goes first again, before the jobs
// recorded after it, and a batch's input file lists its jobs in that order.
func TestBatchOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	t0 := b.clock.Now()
	// Recorded c, then b, then a: their ids sort the other way.
	for _, id := range []string{"c", "b", "a"} {
		b.deferrable(t, id)
		b.clock.Advance(time.Second)
	}
	undecided := store.BatchCandidates{Undecided: true}
	_, jobs, err := b.store.Batches().ReserveBatch(b.ctx, store.BatchReservation{ID: "lb_1", Model: "big", MaxJobs: 1,
		Candidates: undecided})
	require.NoError(t, err)
	require.Equal(t, []store.Key{acme("c")}, batchKeys(jobs))
	// The upload was refused: c is back in the batch lane's pool, changed
	// last of the three.
	b.clock.Advance(time.Second)
	_, err = b.store.Batches().AbandonBatch(b.ctx, "lb_1", "upload refused", false, "")
	require.NoError(t, err)

	pending, err := b.store.Batches().PendingBatchModels(b.ctx, undecided)
	require.NoError(t, err)
	require.Equal(t, []store.PendingModel{{Model: "big", Jobs: 3, Oldest: t0}}, pending,
		"the oldest pending job was recorded at t0")
	_, jobs, err = b.store.Batches().ReserveBatch(b.ctx, store.BatchReservation{ID: "lb_2", Model: "big", MaxJobs: 2,
		Candidates: undecided})
	require.NoError(t, err)
	require.Equal(t, []store.Key{acme("c"), acme("b")}, batchKeys(jobs))
	jobs, err = b.store.Batches().BatchJobs(b.ctx, "lb_2")
	require.NoError(t, err)
	require.Equal(t, []store.Key{acme("c"), acme("b")}, batchKeys(jobs), "the input file in the order reserved")
}

func batchKeys(jobs []store.BatchJob) []store.Key {
	keys := make([]store.Key, len(jobs))
	for i, j := range jobs {
		keys[i] = j.Key
	}
	return keys
}
