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
// (store.LaneRates.PredictCompletion, docs/design/gateway.md).

// LaneRateWriter is the store's lane_rates table (Config.LaneRates); a
// *store.LaneRates is one.
type LaneRateWriter interface {
	SetLaneRates(ctx context.Context, worker string, rates []store.LaneRate) error
}

// rate is lane l's row from its snapshot s: the limits of its RPM and TPM
// buckets (0 while not known), its concurrency (0 while a slow start grows
// it: shaping.Lane.ConcurrencyKnown), and the mean latency of its last
// calls.
func (l *lane) rate(s shaping.Snapshot) store.LaneRate {
	r := store.LaneRate{Model: l.model, Entry: l.entry, InFlight: s.InFlight, Latency: l.health.mean()}
	if l.shaper.ConcurrencyKnown() {
		r.Concurrency = s.ConcurrencyLimit
	}
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
	lw := w.cfg.LaneRates
	if lw == nil || len(rates) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := lw.SetLaneRates(ctx, w.cfg.Owner, rates); err != nil && ctx.Err() == nil {
		w.log.Debug("record the lanes' rates", slog.Any("error", err))
	}
}
