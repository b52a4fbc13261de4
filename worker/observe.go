package worker

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
)

// Drain is the estimated time to work off the queue: the jobs waiting (in
// the broker, and queued or held in Postgres) over the rate at which all
// workers finished jobs in the last minute (read from Postgres, so N
// workers do not each count the whole queue against their own share);
// before any job finished, over the rate the configured quotas allow. It
// is 0 with an empty queue and DrainUnknown when no rate is known. The
// batch lane compares it with its threshold.
func (w *Worker) Drain() time.Duration { return w.gauges.Drain() }

// DrainUnknown is Drain's answer when jobs wait and no rate is known.
const DrainUnknown = 24 * time.Hour

const (
	// drainWindow is how far back the completion rate is measured.
	drainWindow = time.Minute
	// measureEvery is how many gauge ticks (seconds) pass between two
	// readings of the queue's figures.
	measureEvery = 5
	// statsCost bounds the time the worker spends counting the queue in
	// Postgres: after a count that took d, the next waits statsCost × d at
	// least (every measureEvery seconds up to 100 ms a count; at 1,000,000
	// queued jobs, where a count takes 0.2-0.8 s under load, every 10-40 s).
	statsCost = 50
)

// depthReader reads the broker's depth ([transport.Subscriber]).
type depthReader interface {
	Depth(ctx context.Context) (int64, error)
}

// statsReader reads the queue's figures in Postgres ([JobStore]).
type statsReader interface {
	QueueStats(ctx context.Context, since time.Time, limit int64) (store.QueueStats, error)
}

// laneObserver is what the gauges read of the lanes: observeLanes
// refreshes their gauges and records their rates; quotaRate is the jobs per second their quotas allow.
type laneObserver interface {
	observeLanes(ctx context.Context)
	quotaRate() float64
}

// gaugesConfig configures the gauges.
type gaugesConfig struct {
	Broker depthReader  // required
	Store  statsReader  // required
	Lanes  laneObserver // required
	// QueueDepth is the gauge of the jobs waiting (required).
	QueueDepth prometheus.Gauge
	// Window is set from each count of the queue (nil: none); Budgets
	// refreshes its gauges with each measure (nil: none).
	Window  *windowCount
	Budgets *budgetSweep
	Clock   clockwork.Clock
}

func (c gaugesConfig) withDefaults() gaugesConfig {
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	return c
}

func (c gaugesConfig) validate() error {
	if c.Broker == nil || c.Store == nil || c.Lanes == nil || c.QueueDepth == nil {
		return errors.New("worker: gauges: Broker, Store, Lanes and QueueDepth are required")
	}
	return nil
}

// gauges refreshes the lanes' gauges every second, and the queue's depth
// and drain estimate every measureEvery seconds.
type gauges struct {
	cfg gaugesConfig
	// depth is the broker's last depth; drain the estimated time to empty
	// the queue (see Drain).
	depth atomic.Int64
	drain atomic.Int64
	// stats are the newest Postgres figures of the queue, read at most
	// again at statsAt (measure's goroutine only).
	stats   store.QueueStats
	statsAt time.Time
}

func newGauges(cfg gaugesConfig) (*gauges, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &gauges{cfg: cfg}, nil
}

// Drain is the last drain estimate ([Worker.Drain]).
func (g *gauges) Drain() time.Duration { return time.Duration(g.drain.Load()) }

// Run refreshes the gauges until ctx ends.
func (g *gauges) Run(ctx context.Context) {
	tick := g.cfg.Clock.NewTicker(time.Second)
	defer tick.Stop()
	for n := 0; ; n++ {
		if n%measureEvery == 0 {
			g.measure(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.Chan():
		}
		g.cfg.Lanes.observeLanes(ctx)
	}
}

// observeLanes refreshes the gauges of lane and scope state and records
// the lanes' rates (store.LaneRate) for the API's predictions.
func (w *Worker) observeLanes(ctx context.Context) {
	lanes := w.lanes.all()
	rates := make([]store.LaneRate, 0, len(lanes))
	for _, l := range lanes {
		s := l.shaper.Snapshot()
		rates = append(rates, l.rate(s))
		w.metrics.concurrencyLimit.WithLabelValues(l.model, l.entry).Set(float64(s.ConcurrencyLimit))
		w.metrics.quotaShare.WithLabelValues(l.model, l.entry).Set(s.Share)
		w.observeCapacity(l, s)
		for _, b := range s.Buckets {
			w.metrics.bucketLevel.WithLabelValues(l.model, l.entry, b.Name).Set(b.Level)
		}
	}
	w.writeLaneRates(ctx, rates)
	w.scopes.observeScopes()
}

// measure reads the broker's depth and the Postgres figures (these no more
// often than statsCost allows: a slow count is reused until then), and
// updates the depth gauge and the drain estimate.
func (g *gauges) measure(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, measureEvery*time.Second)
	defer cancel()
	if d, err := g.cfg.Broker.Depth(ctx); err == nil {
		g.depth.Store(d)
	}
	now := g.cfg.Clock.Now()
	st := g.stats
	if !now.Before(g.statsAt) {
		var err error
		var claimed int64
		if g.cfg.Window != nil {
			claimed = g.cfg.Window.claims()
		}
		if st, err = g.cfg.Store.QueueStats(ctx, now.Add(-drainWindow), 0); err != nil {
			return
		}
		g.stats, g.statsAt = st, now.Add(statsCost*g.cfg.Clock.Since(now))
		if g.cfg.Window != nil {
			g.cfg.Window.set(st.Queued, false, claimed)
		}
	}
	if g.cfg.Budgets != nil {
		g.cfg.Budgets.measure(ctx)
	}
	g.cfg.QueueDepth.Set(float64(g.depth.Load() + st.Queued))
	rate := float64(st.Finished) / drainWindow.Seconds()
	if st.Finished == 0 {
		rate = g.cfg.Lanes.quotaRate()
	}
	g.drain.Store(int64(drainEstimate(g.depth.Load()+st.Queued+st.InFlight, rate)))
}

// quotaRate is the jobs per second the configured quotas allow, with the
// lanes' typical requests. A model with a key pool counts as one model per
// key, with the key's limits.
func (w *Worker) quotaRate() float64 {
	cat, firstOf := w.catalog(), map[string]string{}
	if len(w.cfg.Pools) > 0 {
		cat.Models = maps.Clone(cat.Models)
		for model, pool := range w.cfg.Pools {
			m, ok := cat.Models[model]
			if !ok {
				continue
			}
			delete(cat.Models, model)
			for _, e := range pool {
				m.RPM, m.TPM = e.RPM, e.TPM
				name := laneName(model, e.Name)
				cat.Models[name], firstOf[name] = m, laneName(model, pool[0].Name)
			}
		}
	}
	return QuotaRate(cat, func(name string) (shaping.Request, bool) {
		// A pool's typical request is its first key's lane's.
		if l, ok := w.lanes.get(cmp.Or(firstOf[name], name)); ok {
			return l.typical(), true
		}
		return shaping.Request{}, false
	})
}

// QuotaRate is the jobs per second the quotas of cat allow: over its
// models, the RPM, or the TPM over the model's typical request, whichever
// binds. typical gives a model's typical request when known (nil, or false:
// no prompt and the model's default output allowance). 0 when no quota is
// configured. It is the drain estimate's rate before any job finished.
func QuotaRate(cat llmq.Catalog, typical func(model string) (shaping.Request, bool)) float64 {
	var rate float64
	for name := range cat.Models {
		m := laneModel(cat, name)
		perSec := 0.0
		if m.RPM > 0 {
			perSec = m.RPM / 60
		}
		if m.TPM > 0 {
			req := shaping.Request{MaxOutputTokens: m.MaxOutputDefault}
			if typical != nil {
				if r, ok := typical(name); ok {
					req = r
				}
			}
			if byTokens := m.TPM / 60 / float64(max(1, req.PromptTokens+req.MaxOutputTokens)); perSec == 0 || byTokens < perSec {
				perSec = byTokens
			}
		}
		rate += perSec
	}
	return rate
}

// drainEstimate is depth / rate (jobs per second), capped at DrainUnknown.
func drainEstimate(depth int64, rate float64) time.Duration {
	switch {
	case depth <= 0:
		return 0
	case rate <= 0:
		return DrainUnknown
	}
	seconds := float64(depth) / rate
	if seconds >= DrainUnknown.Seconds() {
		return DrainUnknown
	}
	return time.Duration(seconds * float64(time.Second))
}
