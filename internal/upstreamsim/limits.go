package upstreamsim

import (
	"cmp"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
)

// limitBook holds the models' limits in force: the configuration's, with
// the overrides SetLimits and the schedule made since the server was born.
type limitBook struct {
	cfg   Config
	clock clockwork.Clock
	born  time.Time
	log   *slog.Logger

	// mu guards the overrides and the schedule position.
	mu        sync.RWMutex
	overrides map[string]Limits // "*" = default
	schedNext int
	schedule  []ScheduleEntry
}

func newLimitBook(cfg Config, clock clockwork.Clock, log *slog.Logger) *limitBook {
	b := &limitBook{cfg: cfg, clock: clock, born: clock.Now(), log: log, overrides: map[string]Limits{},
		schedule: append([]ScheduleEntry(nil), cfg.Schedule...)}
	sort.SliceStable(b.schedule, func(i, j int) bool { return b.schedule[i].At < b.schedule[j].At })
	return b
}

// model returns the configuration of a model, with limit overrides
// (set, schedule) applied, and whether the model is known.
func (b *limitBook) model(name string) (ModelConfig, bool) {
	b.applySchedule()
	m, ok := b.cfg.Models[name]
	if !ok {
		m = b.cfg.Default
	}
	b.mu.RLock()
	if l, has := b.overrides[name]; has {
		m.Limits = l
	} else if l, has := b.overrides["*"]; has && !ok {
		m.Limits = l
	}
	b.mu.RUnlock()
	return m, ok || !b.cfg.RestrictModels
}

// set is Server.SetLimits.
func (b *limitBook) set(model string, l Limits) {
	if model == "" {
		model = "*"
	}
	b.mu.Lock()
	cur, ok := b.overrides[model]
	if !ok {
		cur = b.cfg.Default.Limits
		if m, has := b.cfg.Models[model]; has {
			cur = m.Limits
		}
	}
	l.RPM = cmp.Or(l.RPM, cur.RPM)
	l.TPM = cmp.Or(l.TPM, cur.TPM)
	l.MaxConcurrency = cmp.Or(l.MaxConcurrency, cur.MaxConcurrency)
	l.BurstGrowth = cmp.Or(l.BurstGrowth, cur.BurstGrowth)
	l.BurstFloor = cmp.Or(l.BurstFloor, cur.BurstFloor)
	b.overrides[model] = l
	b.mu.Unlock()
	b.log.Info("upstreamsim: limits changed", "model", model, "rpm", l.RPM, "tpm", l.TPM, "concurrency", l.MaxConcurrency)
}

// applySchedule sets the limits of the schedule's entries that are due.
func (b *limitBook) applySchedule() {
	b.mu.RLock()
	pending := b.schedNext < len(b.schedule)
	b.mu.RUnlock()
	if !pending {
		return
	}
	elapsed := b.clock.Now().Sub(b.born)
	for {
		b.mu.Lock()
		if b.schedNext >= len(b.schedule) || b.schedule[b.schedNext].At > elapsed {
			b.mu.Unlock()
			return
		}
		e := b.schedule[b.schedNext]
		b.schedNext++
		b.mu.Unlock()
		b.set(e.Model, e.Limits)
	}
}

// inflightCounts counts each model's requests in flight.
type inflightCounts struct {
	mu sync.Mutex
	m  map[string]*atomic.Int64
}

// of returns model's counter.
func (c *inflightCounts) of(model string) *atomic.Int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.m[model]
	if n == nil {
		n = new(atomic.Int64)
		c.m[model] = n
	}
	return n
}

// dice draws the faults from the seed, one draw at a time.
type dice struct {
	mu  sync.Mutex
	rng *rand.Rand
}

func (d *dice) float() float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.rng.Float64()
}
