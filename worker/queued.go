package worker

import (
	"context"
	"log/slog"
	"time"
)

// How long the queued listener waits before it reconnects: doubling from
// queuedRetryMin to queuedRetryMax while the connection keeps failing.
const (
	queuedRetryMin = 100 * time.Millisecond
	queuedRetryMax = 10 * time.Second
)

// queuedLoop listens for jobs recorded elsewhere (Config.Queued) until ctx
// ends: each announced model is claimed for at once, and so is every model
// once it listens again (the jobs recorded while it did not are not
// announced again). It reconnects when the connection fails; meanwhile the
// claim tick still claims.
func (w *Worker) queuedLoop(ctx context.Context) {
	defer w.background.Done()
	delay := queuedRetryMin
	for {
		heard := false
		err := w.cfg.Queued.ListenJobsQueued(ctx, func() {
			heard = true
			w.rereadModels()
		}, func(model string) {
			w.learnModel(model)
			w.poke()
		})
		if ctx.Err() != nil {
			return
		}
		if heard {
			delay = queuedRetryMin
		}
		w.log.Warn("worker: the queued jobs' listening connection failed; reconnecting",
			slog.Any("error", err), slog.Duration("in", delay))
		select {
		case <-w.cfg.Clock.After(delay):
		case <-ctx.Done():
			return
		}
		delay = min(2*delay, queuedRetryMax)
	}
}

// rereadModels makes the next claim round read the models with queued jobs
// from Postgres, and wakes it.
func (w *Worker) rereadModels() {
	w.reread.Store(true)
	w.poke()
}
