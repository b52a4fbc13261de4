// Package tenancy serves the tenants, projects and API keys kept as data
// in Postgres (docs/design/tenants.md#tenants-as-data) to a replica: an
// immutable Snapshot, swapped whole when the tables change. A Watcher
// listens on store.TenancyChannel, reloads at every change and every
// Period as a backstop, and keeps serving its last good snapshot while
// the database is away.
package tenancy

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// PeriodDefault is the reload period that backs up the notifications.
const PeriodDefault = 30 * time.Second

// retryDefault is the wait before listening again after the listening
// connection failed.
const retryDefault = time.Second

// Key is an API key a replica accepts: its name and tenant.
type Key struct {
	Name, Tenant string
	// ExpiresAt is when it stops being accepted; zero: never.
	ExpiresAt time.Time
}

// Snapshot is the tenancy as one load read it. It is never changed.
type Snapshot struct {
	// Tenants are the tenants and projects, as every component reads
	// them.
	Tenants llmq.Tenants
	// Models are the models kept as data by name; nil until the
	// configuration's were imported (the configuration's apply then).
	Models map[string]llmq.Model
	keys   map[[sha256.Size]byte]Key
	// Loaded is when it was read.
	Loaded time.Time
	// Seq counts the loads of its watcher: 1 for the first.
	Seq int64
}

// Key returns the key whose SHA-256 is hash, when it is neither revoked
// nor expired at now.
func (s *Snapshot) Key(hash [sha256.Size]byte, now time.Time) (Key, bool) {
	k, ok := s.keys[hash]
	if !ok || (!k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt)) {
		return Key{}, false
	}
	return k, true
}

// Build makes a snapshot of rows: revoked keys are left out.
func Build(rows *store.TenancyRows, loaded time.Time) *Snapshot {
	s := &Snapshot{Tenants: rows.AsTenants(), keys: make(map[[sha256.Size]byte]Key, len(rows.Keys)), Loaded: loaded}
	if rows.ModelsImported {
		s.Models = rows.ModelMap()
	}
	for _, k := range rows.Keys {
		if k.RevokedAt != nil || len(k.Hash) != sha256.Size {
			continue
		}
		key := Key{Name: k.Name, Tenant: k.Tenant}
		if k.ExpiresAt != nil {
			key.ExpiresAt = *k.ExpiresAt
		}
		s.keys[[sha256.Size]byte(k.Hash)] = key
	}
	return s
}

// Source is where a watcher reads the tenancy; a *store.Tenancy is one.
type Source interface {
	Load(ctx context.Context) (*store.TenancyRows, error)
	Listen(ctx context.Context, listening, changed func()) error
}

// Config tunes a Watcher.
type Config struct {
	// Period is the reload that backs up the notifications. 0 =
	// PeriodDefault.
	Period time.Duration
	// OnLoad, when set, is called with every snapshot loaded, from the
	// watcher's goroutine, after it is served.
	OnLoad func(*Snapshot)
	// Logger receives the failed loads. nil = slog.Default().
	Logger *slog.Logger
	// Clock times the period and stamps the snapshots. nil = the system
	// clock.
	Clock clockwork.Clock
}

// Watcher serves the newest snapshot it could load. It is safe for
// concurrent use.
type Watcher struct {
	src   Source
	cfg   Config
	cur   atomic.Pointer[Snapshot]
	seq   atomic.Int64
	kick  chan struct{}
	fails atomic.Int64
}

// New returns a watcher of src serving an empty snapshot until its first
// load.
func New(src Source, cfg Config) *Watcher {
	if cfg.Period <= 0 {
		cfg.Period = PeriodDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	w := &Watcher{src: src, cfg: cfg, kick: make(chan struct{}, 1)}
	w.cur.Store(&Snapshot{Tenants: llmq.Tenants{}})
	return w
}

// Snapshot is the snapshot served now.
func (w *Watcher) Snapshot() *Snapshot { return w.cur.Load() }

// Tenants are the tenants served now.
func (w *Watcher) Tenants() llmq.Tenants { return w.cur.Load().Tenants }

// Catalog is base with the models served now in place of its own, once
// they were imported: the catalog every component applies.
func (w *Watcher) Catalog(base llmq.Catalog) llmq.Catalog {
	if m := w.cur.Load().Models; m != nil {
		base.Models = m
	}
	return base
}

// Failures counts the loads that failed since the watcher was made.
func (w *Watcher) Failures() int64 { return w.fails.Load() }

// Load reads the tenancy once and serves it; on an error the snapshot
// served stays.
func (w *Watcher) Load(ctx context.Context) error {
	rows, err := w.src.Load(ctx)
	if err != nil {
		w.fails.Add(1)
		return err
	}
	s := Build(rows, w.cfg.Clock.Now())
	s.Seq = w.seq.Add(1)
	w.cur.Store(s)
	if w.cfg.OnLoad != nil {
		w.cfg.OnLoad(s)
	}
	return nil
}

// Run reloads at every notification and every Period until ctx ends. A
// listening connection that fails is opened again; a load that fails
// keeps the last good snapshot and is tried again at the next
// notification or period.
func (w *Watcher) Run(ctx context.Context) {
	go w.listen(ctx)
	tick := w.cfg.Clock.NewTicker(w.cfg.Period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		case <-tick.Chan():
		}
		if err := w.Load(ctx); err != nil && ctx.Err() == nil {
			w.cfg.Logger.Warn("tenancy: reload failed: serving the last good state", slog.String("error", err.Error()))
		}
	}
}

// listen wakes Run at each change, and once it (re)listens: a change
// between two connections is read then.
func (w *Watcher) listen(ctx context.Context) {
	wake := func() {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	for ctx.Err() == nil {
		err := w.src.Listen(ctx, wake, wake)
		if ctx.Err() != nil {
			return
		}
		w.cfg.Logger.Warn("tenancy: listening failed", slog.String("error", err.Error()))
		select {
		case <-ctx.Done():
		case <-w.cfg.Clock.After(retryDefault):
		}
	}
}
