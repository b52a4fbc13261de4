package worker

import (
	"context"
	"errors"
	"log/slog"

	"github.com/llmq/llmq/store"
)

// Leases: a claim holds a job for Config.Lease. The heartbeat renews, in
// one statement every HeartbeatInterval, the lease of every job this worker
// still runs (a job it gave up is left to expire and be reaped), so a job
// may wait for admission, back off or call for as long as it needs;
// a job missing from the heartbeat's answer was taken from this worker
// (reaped after its lease expired, maybe claimed again): whatever it
// waits for is cancelled at once, without a write (a call in flight is left
// to finish: its answer is stored all the same). The reaper, on any worker,
// hands back the jobs whose lease expired (their worker died) and expires
// queued jobs whose deadline passed.

// errLeaseLost is the cause of a job's cancellation when its lease was
// taken from this worker.
var errLeaseLost = errors.New("worker: lease lost")

// register records p as held by this worker.
func (w *Worker) register(p *job) {
	w.heldMu.Lock()
	w.heldSeq++
	p.seq = w.heldSeq
	w.held[p.lease.Key] = p
	w.heldMu.Unlock()
}

// unregister forgets p.
func (w *Worker) unregister(p *job) {
	w.heldMu.Lock()
	if w.held[p.lease.Key] == p {
		delete(w.held, p.lease.Key)
	}
	w.heldMu.Unlock()
}

// heartbeatLoop renews the leases every HeartbeatInterval until ctx ends.
func (w *Worker) heartbeatLoop(ctx context.Context) {
	defer w.background.Done()
	t := w.cfg.Clock.NewTicker(w.cfg.HeartbeatInterval)
	defer t.Stop()
	renewed := w.cfg.Clock.Now()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
		if w.heartbeat(ctx) {
			renewed = w.cfg.Clock.Now()
			if failing {
				failing = false
				w.log.Info("heartbeat renews the leases again")
			}
			continue
		}
		if !failing {
			failing = true
			w.log.Warn("heartbeat failed: leases are not renewed")
		}
		if w.cfg.Clock.Since(renewed) >= w.cfg.Lease {
			// The leases have expired: any worker may reap and claim the
			// jobs. Everything still waiting is given up.
			w.loseAll(0)
		}
	}
}

// heartbeat renews the leases and cancels the jobs whose lease is gone; it
// reports whether the renewal was written.
func (w *Worker) heartbeat(ctx context.Context) bool {
	w.heldMu.Lock()
	seq := w.heldSeq
	held := make([]store.Lease, 0, len(w.held))
	for _, p := range w.held {
		held = append(held, p.lease)
	}
	w.heldMu.Unlock()
	// A renewal that takes longer than the lease comes too late anyway.
	ctx, cancel := context.WithTimeout(ctx, w.cfg.Lease)
	defer cancel()
	leases, err := w.cfg.Store.Heartbeat(ctx, w.cfg.Owner, w.cfg.Lease, held)
	if err != nil {
		w.log.Debug("heartbeat", slog.Any("error", err))
		return false
	}
	renewed := make(map[store.Lease]bool, len(leases))
	for _, l := range leases {
		renewed[l] = true
	}
	w.heldMu.Lock()
	var lost []*job
	for _, p := range w.held {
		// A job registered after the heartbeat began was not in it.
		if p.seq <= seq && !renewed[p.lease] {
			lost = append(lost, p)
		}
	}
	w.heldMu.Unlock()
	for _, p := range lost {
		p.lose()
	}
	return true
}

// loseAll cancels every held job registered up to seq (0: all).
func (w *Worker) loseAll(seq uint64) {
	w.heldMu.Lock()
	var lost []*job
	for _, p := range w.held {
		if seq == 0 || p.seq <= seq {
			lost = append(lost, p)
		}
	}
	w.heldMu.Unlock()
	for _, p := range lost {
		p.lose()
	}
}

// reapLoop sweeps every ReapInterval until ctx ends: expired leases back to
// queued, overdue queued jobs to expired. The statements are idempotent:
// several workers may sweep at once.
func (w *Worker) reapLoop(ctx context.Context) {
	defer w.background.Done()
	t := w.cfg.Clock.NewTicker(w.cfg.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
		w.reap(ctx)
	}
}

// reap runs one sweep.
func (w *Worker) reap(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.ReapInterval)
	defer cancel()
	if keys, err := w.cfg.Store.ReapExpired(ctx); err != nil {
		w.log.Debug("reap expired leases", slog.Any("error", err))
	} else if len(keys) > 0 {
		w.metrics.reaped.Add(float64(len(keys)))
		w.log.Info("jobs whose lease expired handed back", slog.Int("jobs", len(keys)))
		w.poke()
	}
	if keys, err := w.cfg.Store.ExpireOverdue(ctx); err != nil {
		w.log.Debug("expire overdue jobs", slog.Any("error", err))
	} else if len(keys) > 0 {
		w.metrics.jobs.WithLabelValues("expired").Add(float64(len(keys)))
		w.log.Info("queued jobs past their deadline expired", slog.Int("jobs", len(keys)))
	}
	w.reapBudgets(ctx)
}
