package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
)

// Every second the worker records what each of its lanes runs at (table
// lane_rates): the API predicts a call's completion from it
// (store.PredictCompletion, docs/design/gateway.md).

// laneRateWriter is the store's lane_rates table; a JobStore without it
// (a test's) records none.
type laneRateWriter interface {
	SetLaneRates(ctx context.Context, worker string, rates []store.LaneRate) error
}

// rate is lane l's row from its snapshot s: the limits of its RPM and TPM
// buckets (0 while not known), its concurrency, and the mean latency of
// its last calls.
func (l *lane) rate(s shaping.Snapshot) store.LaneRate {
	r := store.LaneRate{Model: l.model, Entry: l.entry, Concurrency: s.ConcurrencyLimit, InFlight: s.InFlight,
		Latency: l.health.mean()}
	for _, b := range s.Buckets {
		switch b.Name {
		case "rpm":
			r.RequestsPerMin = b.Limit
		case "tpm":
			r.TokensPerMin = b.Limit
		}
	}
	return r
}

// writeLaneRates records rates; a failure is logged, and the next second
// writes them again.
func (w *Worker) writeLaneRates(ctx context.Context, rates []store.LaneRate) {
	lw, ok := w.cfg.Store.(laneRateWriter)
	if !ok || len(rates) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := lw.SetLaneRates(ctx, w.cfg.Owner, rates); err != nil && ctx.Err() == nil {
		w.log.Debug("record the lanes' rates", slog.Any("error", err))
	}
}
