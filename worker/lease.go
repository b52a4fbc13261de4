package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/llmq/llmq/store"
)

// Leases: a claim holds a job for Config.Lease. The heartbeat renews, in
// one statement every HeartbeatInterval, the lease of every job this worker
// still runs (a job it gave up is left to expire and be reaped), so a job
// may wait for admission, back off or call for as long as it needs;
// a job missing from the heartbeat's answer was taken from this worker
// (reaped after its lease expired, maybe claimed again): whatever it
// waits for is cancelled at once, without a write (a call in flight is left
// to finish: its answer is stored all the same).

// errLeaseLost is the cause of a job's cancellation when its lease was
// taken from this worker.
var errLeaseLost = errors.New("worker: lease lost")

// leaseRenewer renews the leases of an owner's jobs ([JobStore.Heartbeat]).
type leaseRenewer interface {
	Heartbeat(ctx context.Context, owner string, lease time.Duration, held []store.Lease) ([]store.Lease, error)
}

// heartbeatConfig configures a heartbeat.
type heartbeatConfig struct {
	Store    leaseRenewer // required
	Owner    string       // required
	Lease    time.Duration
	Interval time.Duration // shorter than Lease; default Lease/3
	Clock    clockwork.Clock
	Log      *slog.Logger
}

func (c heartbeatConfig) withDefaults() heartbeatConfig {
	c.Lease = cmp.Or(max(0, c.Lease), LeaseDefault)
	c.Interval = cmp.Or(max(0, c.Interval), c.Lease/3)
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return c
}

func (c heartbeatConfig) validate() error {
	if c.Store == nil || c.Owner == "" {
		return errors.New("worker: heartbeat: Store and Owner are required")
	}
	if c.Interval >= c.Lease {
		return fmt.Errorf("worker: heartbeat: Interval (%v) must be shorter than Lease (%v)", c.Interval, c.Lease)
	}
	return nil
}

// heartbeat holds the jobs this worker holds and renews their leases.
type heartbeat struct {
	cfg heartbeatConfig
	// mu guards held and seq: the jobs held, by key, each with the
	// registration number a renewal compares against.
	mu   sync.Mutex
	held map[store.Key]*job
	seq  uint64
}

func newHeartbeat(cfg heartbeatConfig) (*heartbeat, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &heartbeat{cfg: cfg, held: make(map[store.Key]*job)}, nil
}

// register records p as held.
func (h *heartbeat) register(p *job) {
	h.mu.Lock()
	h.seq++
	p.seq = h.seq
	h.held[p.lease.Key] = p
	h.mu.Unlock()
}

// unregister forgets p.
func (h *heartbeat) unregister(p *job) {
	h.mu.Lock()
	if h.held[p.lease.Key] == p {
		delete(h.held, p.lease.Key)
	}
	h.mu.Unlock()
}

// Run renews the leases every Interval until ctx ends.
func (h *heartbeat) Run(ctx context.Context) {
	t := h.cfg.Clock.NewTicker(h.cfg.Interval)
	defer t.Stop()
	renewed := h.cfg.Clock.Now()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
		if h.renew(ctx) {
			renewed = h.cfg.Clock.Now()
			if failing {
				failing = false
				h.cfg.Log.Info("heartbeat renews the leases again")
			}
			continue
		}
		if !failing {
			failing = true
			h.cfg.Log.Warn("heartbeat failed: leases are not renewed")
		}
		if h.cfg.Clock.Since(renewed) >= h.cfg.Lease {
			// The leases have expired: any worker may reap and claim the
			// jobs. Everything still waiting is given up.
			h.loseAll(0)
		}
	}
}

// renew renews the leases and cancels the jobs whose lease is gone; it
// reports whether the renewal was written.
func (h *heartbeat) renew(ctx context.Context) bool {
	h.mu.Lock()
	seq := h.seq
	held := make([]store.Lease, 0, len(h.held))
	for _, p := range h.held {
		held = append(held, p.lease)
	}
	h.mu.Unlock()
	// A renewal that takes longer than the lease comes too late anyway.
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Lease)
	defer cancel()
	leases, err := h.cfg.Store.Heartbeat(ctx, h.cfg.Owner, h.cfg.Lease, held)
	if err != nil {
		h.cfg.Log.Debug("heartbeat", slog.Any("error", err))
		return false
	}
	renewed := make(map[store.Lease]bool, len(leases))
	for _, l := range leases {
		renewed[l] = true
	}
	h.mu.Lock()
	var lost []*job
	for _, p := range h.held {
		// A job registered after the heartbeat began was not in it.
		if p.seq <= seq && !renewed[p.lease] {
			lost = append(lost, p)
		}
	}
	h.mu.Unlock()
	for _, p := range lost {
		p.lose()
	}
	return true
}

// loseAll cancels every held job registered up to seq (0: all).
func (h *heartbeat) loseAll(seq uint64) {
	h.mu.Lock()
	var lost []*job
	for _, p := range h.held {
		if seq == 0 || p.seq <= seq {
			lost = append(lost, p)
		}
	}
	h.mu.Unlock()
	for _, p := range lost {
		p.lose()
	}
}
