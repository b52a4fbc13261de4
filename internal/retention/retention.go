package retention

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/background"
	"github.com/llmq/llmq/store"
)

// The default periods (Config). A negative period keeps that kind of row
// forever.
const (
	// SucceededDefault keeps succeeded jobs and their results 7 days.
	SucceededDefault = 7 * 24 * time.Hour
	// UnsuccessfulDefault keeps failed, dead-lettered, expired and
	// cancelled jobs 30 days.
	UnsuccessfulDefault = 30 * 24 * time.Hour
	// DeadLettersDefault keeps dead letters 30 days.
	DeadLettersDefault = 30 * 24 * time.Hour
	// BatchesDefault keeps ingested batches 30 days.
	BatchesDefault = 30 * 24 * time.Hour
	// TombstonesDefault keeps a pruned job's key 30 days.
	TombstonesDefault = 30 * 24 * time.Hour
	// AuditDefault keeps the tenancy's audit log a year.
	AuditDefault = 365 * 24 * time.Hour
	// IntervalDefault is the time between prunes.
	IntervalDefault = 5 * time.Minute
	// FoldIntervalDefault is the time between folds of the usage.
	FoldIntervalDefault = 5 * time.Second
)

// Store is what the Pruner needs of the store.
type Store interface {
	Prune(ctx context.Context, r store.Retention) (store.Pruned, error)
	TableBytes(ctx context.Context) (map[string]int64, error)
	FoldUsage(ctx context.Context) (int64, error)
}

// Config configures a Pruner. Zero periods take their defaults; a negative
// one keeps those rows forever.
type Config struct {
	// Store is required.
	Store Store
	// Succeeded is how long a succeeded job is kept after it finished.
	Succeeded time.Duration
	// Unsuccessful is how long a failed, dead-lettered, expired or
	// cancelled job is kept after it finished (a dead-lettered job, at
	// least as long as its dead letter).
	Unsuccessful time.Duration
	// DeadLetters, Batches and Tombstones: see store.Retention.
	DeadLetters time.Duration
	Batches     time.Duration
	Tombstones  time.Duration
	// Audit: see store.Retention.
	Audit time.Duration
	// Interval is the time between prunes.
	Interval time.Duration
	// FoldInterval is the time between folds of the usage.
	FoldInterval time.Duration
	// BatchSize is the most rows one statement deletes
	// (0 = store.PruneBatchSizeDefault).
	BatchSize int

	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Clock      clockwork.Clock
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.Succeeded = cmp.Or(c.Succeeded, SucceededDefault)
	c.Unsuccessful = cmp.Or(c.Unsuccessful, UnsuccessfulDefault)
	c.DeadLetters = cmp.Or(c.DeadLetters, DeadLettersDefault)
	c.Batches = cmp.Or(c.Batches, BatchesDefault)
	c.Tombstones = cmp.Or(c.Tombstones, TombstonesDefault)
	c.Audit = cmp.Or(c.Audit, AuditDefault)
	c.Interval = cmp.Or(c.Interval, IntervalDefault)
	c.FoldInterval = cmp.Or(c.FoldInterval, FoldIntervalDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	return c
}

// Retention is c's periods as the store takes them (a negative period
// becomes 0: keep forever).
func (c Config) Retention() store.Retention {
	keep := func(d time.Duration) time.Duration { return max(d, 0) }
	unsuccessful := keep(c.Unsuccessful)
	return store.Retention{
		Jobs: map[llmq.Status]time.Duration{
			llmq.StatusSucceeded:    keep(c.Succeeded),
			llmq.StatusFailed:       unsuccessful,
			llmq.StatusDeadLettered: unsuccessful,
			llmq.StatusExpired:      unsuccessful,
			llmq.StatusCancelled:    unsuccessful,
		},
		DeadLetters: keep(c.DeadLetters),
		Batches:     keep(c.Batches),
		Tombstones:  keep(c.Tombstones),
		Audit:       keep(c.Audit),
		BatchSize:   c.BatchSize,
	}
}

func (c Config) validate() error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, errors.New("retention: Config.Store is required"))
	}
	if c.Interval < 0 || c.FoldInterval < 0 || c.BatchSize < 0 {
		errs = append(errs, errors.New("retention: Config.Interval, Config.FoldInterval and Config.BatchSize must not be negative"))
	}
	// A tombstone must outlive the jobs it stands for by more than the
	// brokers' retention; at the least it must not go before they do.
	if c.Tombstones > 0 && c.Tombstones < 24*time.Hour {
		errs = append(errs, fmt.Errorf("retention: Config.Tombstones (%v) must be at least 24h: a tombstone "+
			"keeps a late duplicate message from being run again, and must outlive the broker's retention", c.Tombstones))
	}
	return errors.Join(errs...)
}

// Pruner prunes every Interval and folds the usage every FoldInterval
// between Start and Stop.
type Pruner struct {
	cfg     Config
	deleted *prometheus.CounterVec
	bytes   *prometheus.GaugeVec
	folded  prometheus.Counter
	runner  background.Runner
	folder  background.Runner
}

// New returns a Pruner; it registers its metrics with cfg.Registerer.
func New(cfg Config) (*Pruner, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Pruner{
		cfg: cfg,
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmq_retention_deleted_total",
			Help: "Rows deleted by retention, by kind (jobs, dead_letters, batches, tombstones).",
		}, []string{"kind"}),
		bytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "llmq_store_table_bytes",
			Help: "Size on disk of llmq's growing tables (rows, TOAST and indexes), measured at each prune.",
		}, []string{"table"}),
		folded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "llmq_usage_folded_total",
			Help: "Rows of the usage (job_usage) that finishing jobs added, folded by the second or the day.",
		}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{p.deleted, p.bytes, p.folded} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("retention: register metrics: %w", err)
			}
		}
	}
	return p, nil
}

// Start prunes once at once, then every Interval, and folds the usage
// every FoldInterval, until Stop or ctx ends.
func (p *Pruner) Start(ctx context.Context) error {
	if err := p.runner.Start(ctx, p.run); err != nil {
		return fmt.Errorf("retention: %w", err)
	}
	if err := p.folder.Start(ctx, p.fold); err != nil {
		return fmt.Errorf("retention: %w", err)
	}
	return nil
}

// Stop ends the prunes and the folds and waits for the current ones
// (bounded by ctx).
func (p *Pruner) Stop(ctx context.Context) error {
	if err := errors.Join(p.runner.Stop(ctx), p.folder.Stop(ctx)); err != nil {
		return fmt.Errorf("retention: %w", err)
	}
	return nil
}

func (p *Pruner) fold(ctx context.Context) {
	t := p.cfg.Clock.NewTicker(p.cfg.FoldInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
		n, err := p.cfg.Store.FoldUsage(ctx)
		p.folded.Add(float64(n))
		if err != nil && ctx.Err() == nil {
			p.cfg.Logger.Warn("retention: usage fold failed", slog.String("error", err.Error()))
		}
	}
}

func (p *Pruner) run(ctx context.Context) {
	t := p.cfg.Clock.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := p.Prune(ctx); err != nil && ctx.Err() == nil {
			p.cfg.Logger.Warn("retention: prune failed", slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
	}
}

// Prune runs one prune now, counts what it deleted and measures the
// tables.
func (p *Pruner) Prune(ctx context.Context) (store.Pruned, error) {
	pruned, err := p.cfg.Store.Prune(ctx, p.cfg.Retention())
	var n int64
	for kind, k := range pruned {
		p.deleted.WithLabelValues(kind).Add(float64(k))
		n += k
	}
	if n > 0 {
		p.cfg.Logger.Info("retention: pruned", slog.Any("deleted", map[string]int64(pruned)))
	}
	if err != nil {
		return pruned, err
	}
	sizes, err := p.cfg.Store.TableBytes(ctx)
	if err != nil {
		return pruned, err
	}
	for table, b := range sizes {
		p.bytes.WithLabelValues(table).Set(float64(b))
	}
	return pruned, nil
}
