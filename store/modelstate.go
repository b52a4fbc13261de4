package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/llmq/llmq"
)

// Waiting reasons of a queued job (JobRecord.WaitingReason).
const (
	// WaitingReasonProviderQuota: the schedulers of the job's model claim
	// no more than the provider's quota lets them admit soon.
	WaitingReasonProviderQuota = "provider_quota"
	// WaitingReasonBudget: a budget of the job's tenant or project holds
	// it until the period rolls over or a reservation is given back
	// (budget.go).
	WaitingReasonBudget = "budget"
	// WaitingReasonBatch: the job is deferrable and held for, or waiting
	// in, the batch lane.
	WaitingReasonBatch = "batch"
	// WaitingReasonPaused: the job's tenant or project is paused
	// (llmq.Scope.Paused): no scheduler claims it until it is resumed.
	WaitingReasonPaused = "paused"
)

// fillPausedReasons sets WaitingReasonPaused on the queued records of a
// paused tenant or project, over any other reason.
func (s *base) fillPausedReasons(recs []*JobRecord) {
	ts := s.order.tenants()
	for _, r := range recs {
		if r.Status == llmq.StatusQueued && ts.Paused(r.Tenant, r.Project) {
			r.WaitingReason = WaitingReasonPaused
		}
	}
}

// ModelStateTTL is how long a model state counts after it was written:
// schedulers that hold back rewrite it at least every second, so an older
// one is from a scheduler that stopped.
const ModelStateTTL = 5 * time.Second

// ModelState is what the schedulers of one model hold back (table
// model_state), for the waiting reason of its queued jobs.
type ModelState struct {
	Model string
	// WaitingReason is why queued jobs of the model are left unclaimed
	// ("" = they are claimed as fast as they come).
	WaitingReason string
	// BatchHold says undecided deferrable jobs are left for the batch lane.
	BatchHold bool
	// Worker names the scheduler that wrote it.
	Worker string
}

// SetModelState records st as the model's state, now.
func (s *Queue) SetModelState(ctx context.Context, st ModelState) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO model_state (model, waiting_reason, batch_hold, worker, updated_at)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (model) DO UPDATE SET waiting_reason = excluded.waiting_reason,
		batch_hold = excluded.batch_hold, worker = excluded.worker, updated_at = excluded.updated_at`,
		st.Model, st.WaitingReason, st.BatchHold, st.Worker, s.clock())
	if err != nil {
		return fmt.Errorf("store: set model state %q: %w", st.Model, err)
	}
	return nil
}

// fillModelReasons sets the WaitingReason of the queued records: batch
// for a job of the batch lane, or a deferrable one its model's schedulers
// hold for it; else the reason the model's schedulers last gave, if fresh.
func (s *base) fillModelReasons(ctx context.Context, recs []*JobRecord) error {
	var models []string
	for _, r := range recs {
		if r.Status == llmq.StatusQueued {
			if r.Lane == LaneBatch {
				r.WaitingReason = WaitingReasonBatch
				continue
			}
			models = append(models, r.RequestedModel)
		}
	}
	if len(models) == 0 {
		return nil
	}
	rows, err := s.pool.Query(ctx, `SELECT model, waiting_reason, batch_hold, worker FROM model_state
		WHERE model = ANY($1) AND updated_at > $2`, models, s.clock().Add(-ModelStateTTL))
	if err != nil {
		return err
	}
	states := map[string]ModelState{}
	var st ModelState
	if _, err := pgx.ForEachRow(rows, []any{&st.Model, &st.WaitingReason, &st.BatchHold, &st.Worker}, func() error {
		states[st.Model] = st
		return nil
	}); err != nil {
		return err
	}
	for _, r := range recs {
		st, ok := states[r.RequestedModel]
		if r.Status != llmq.StatusQueued || r.Lane == LaneBatch || !ok {
			continue
		}
		if st.BatchHold && r.Deferrable && r.LaneReason == "" {
			r.WaitingReason = WaitingReasonBatch
			continue
		}
		r.WaitingReason = st.WaitingReason
	}
	return nil
}
