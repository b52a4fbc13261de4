package worker

import (
	"context"
	"errors"
	"log/slog"

	"github.com/llmq/llmq/store"
)

// budgetSweepStore is what the budgets' sweep and gauges need of the
// budgets ([BudgetStore]).
type budgetSweepStore interface {
	ReleaseOrphanBudgets(ctx context.Context) (int, error)
	BudgetUsages(ctx context.Context, tenant string) ([]store.BudgetUsage, error)
}

// budgetSweepConfig configures a budgetSweep.
type budgetSweepConfig struct {
	Store   budgetSweepStore // required
	Metrics *budgetMetrics   // required
	// Released is told of reservations given back (nil: none).
	Released func()
	Log      *slog.Logger
}

func (c budgetSweepConfig) withDefaults() budgetSweepConfig {
	if c.Released == nil {
		c.Released = func() {}
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return c
}

func (c budgetSweepConfig) validate() error {
	if c.Store == nil || c.Metrics == nil {
		return errors.New("worker: budget sweep: Store and Metrics are required")
	}
	return nil
}

// budgetSweep gives back, on each of the reaper's sweeps, the budget
// reservations of jobs no longer held, and refreshes the budget gauges
// when the queue is measured (observe.go).
type budgetSweep struct {
	cfg budgetSweepConfig
}

func newBudgetSweep(cfg budgetSweepConfig) (*budgetSweep, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &budgetSweep{cfg: cfg}, nil
}

// sweep gives back the reservations of jobs no longer held.
func (b *budgetSweep) sweep(ctx context.Context) {
	if n, err := b.cfg.Store.ReleaseOrphanBudgets(ctx); err != nil {
		b.cfg.Log.Debug("release orphan budget reservations", slog.Any("error", err))
	} else if n > 0 {
		b.cfg.Log.Info("budget reservations of jobs no longer held given back", slog.Int("calls", n))
		b.cfg.Released()
	}
}

// measure refreshes the budget gauges (the configured budgets only, so
// the label set is the configuration's).
func (b *budgetSweep) measure(ctx context.Context) {
	us, err := b.cfg.Store.BudgetUsages(ctx, "")
	if err != nil {
		b.cfg.Log.Debug("read budgets", slog.Any("error", err))
		return
	}
	for _, u := range us {
		ls := []string{u.Tenant, u.Project, string(u.Period)}
		b.cfg.Metrics.spent.WithLabelValues(ls...).Set(u.SpentUSD)
		b.cfg.Metrics.reserved.WithLabelValues(ls...).Set(u.ReservedUSD)
		b.cfg.Metrics.limit.WithLabelValues(ls...).Set(u.LimitUSD)
	}
}
