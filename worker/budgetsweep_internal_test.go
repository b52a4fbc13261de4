package worker

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// budgetSweepFake answers with orphans and usages, or err.
type budgetSweepFake struct {
	orphans int
	usages  []store.BudgetUsage
	err     error
}

func (f *budgetSweepFake) ReleaseOrphanBudgets(context.Context) (int, error) { return f.orphans, f.err }

func (f *budgetSweepFake) BudgetUsages(_ context.Context, tenant string) ([]store.BudgetUsage, error) {
	if tenant != "" {
		return nil, errors.New("want every tenant's")
	}
	return f.usages, f.err
}

func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, g.Write(&m))
	return m.GetGauge().GetValue()
}

// TestBudgetSweep: the sweep tells of reservations given back, not of
// none nor of an error; measure sets every budget's gauges.
func TestBudgetSweep(t *testing.T) {
	t.Parallel()
	st := &budgetSweepFake{orphans: 2}
	told := 0
	m := newBudgetMetrics(nil)
	b, err := newBudgetSweep(budgetSweepConfig{Store: st, Metrics: m, Released: func() { told++ }, Log: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	b.sweep(context.Background())
	require.Equal(t, 1, told)
	st.orphans = 0
	b.sweep(context.Background())
	st.err = errors.New("database down")
	b.sweep(context.Background())
	require.Equal(t, 1, told)

	st.err = nil
	st.usages = []store.BudgetUsage{{Budget: llmq.Budget{Tenant: "acme", Project: "bulk", Period: "day", LimitUSD: 10},
		SpentUSD: 4, ReservedUSD: 1.5}}
	b.measure(context.Background())
	require.Equal(t, 4.0, gaugeValue(t, m.spent.WithLabelValues("acme", "bulk", "day")))
	require.Equal(t, 1.5, gaugeValue(t, m.reserved.WithLabelValues("acme", "bulk", "day")))
	require.Equal(t, 10.0, gaugeValue(t, m.limit.WithLabelValues("acme", "bulk", "day")))

	_, err = newBudgetSweep(budgetSweepConfig{Store: st})
	require.ErrorContains(t, err, "required")
}
