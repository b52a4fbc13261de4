package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/store"
)

// Budgets (docs/design/tenants.md#budgets): before each call the job's
// holder reserves the call's price with the whole output allowance on every
// budget of the job's tenant and project (store.ReserveBudget); after the
// call it is settled to the real price or given back. A refused call leaves
// by the scope's overage policy: reject, degrade, or handed back until the
// period rolls over (docs/design/tenants.md#budget-reservations-in-the-worker).

// BudgetStore is what the worker needs of the budgets. [*store.Budgets]
// implements it; its methods document the accounting.
type BudgetStore interface {
	ReserveBudget(ctx context.Context, r store.BudgetReservation) (store.BudgetOutcome, error)
	SettleBudget(ctx context.Context, l store.Lease, costUSD float64) error
	ReleaseBudget(ctx context.Context, l store.Lease) error
	// ReleaseOrphanBudgets gives back the reservations of jobs no longer
	// held (the reaper's sweep).
	ReleaseOrphanBudgets(ctx context.Context) (int, error)
	// MoveToBatch hands a held job back to the batch lane.
	MoveToBatch(ctx context.Context, l store.Lease, reason string) error
	// BudgetUsages reads the budgets for the gauges.
	BudgetUsages(ctx context.Context, tenant string) ([]store.BudgetUsage, error)
}

// BudgetAlerter sends the thresholds a reservation crossed ([*dlq.Alerter]).
type BudgetAlerter interface {
	NotifyBudget(b dlq.BudgetAlert)
}

// budgetMetrics are the gauges of the configured budgets and the count of
// refused calls.
type budgetMetrics struct {
	spent, reserved, limit *prometheus.GaugeVec
	refused                *prometheus.CounterVec
}

func newBudgetMetrics(reg prometheus.Registerer) *budgetMetrics {
	labels := []string{"tenant", "project", "period"}
	m := &budgetMetrics{
		spent: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "llmq_budget_spent_usd",
			Help: "Settled cost of the calls of a configured budget's scope in its current period, USD."}, labels),
		reserved: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "llmq_budget_reserved_usd",
			Help: "Estimated cost of the calls of a configured budget's scope in flight, USD."}, labels),
		limit: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "llmq_budget_limit_usd",
			Help: "A configured budget per tenant (project \"\") or project and period, USD."}, labels),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llmq_budget_refused_total",
			Help: "Calls a budget refused, by tenant, project and what came of the job: wait, reject (dead-lettered) or batch (moved to the batch lane)."},
			[]string{"tenant", "project", "outcome"}),
	}
	if reg != nil {
		reg.MustRegister(m.spent, m.reserved, m.limit, m.refused)
	}
	return m
}

// jobEnds are the ways a job leaves the pipeline, and its writes bounded
// by the shutdown's grace period ([caller]).
type jobEnds interface {
	gone(p *job, what string, err error) bool
	pause(p *job) bool
	fail(p *job, status int, code, msg string)
	deadLetter(p *job, reason dlq.Reason, lastError string)
	release(p *job)
	writeOut(p *job, what string, write func(ctx context.Context) error) error
}

// budgetGateConfig configures a budgetGate.
type budgetGateConfig struct {
	// Store keeps the budgets; nil: the worker keeps none, and every call
	// goes.
	Store BudgetStore
	// Tenants are the tenants applied now, with their budgets. Required.
	Tenants func() llmq.Tenants
	// Alerts is sent the thresholds crossed (nil: logged only).
	Alerts  BudgetAlerter
	Metrics *budgetMetrics // required
	// Degrade: a batch lane takes the deferrable jobs of a budget that
	// degrades (Config.Router is set).
	Degrade bool
	// Priced is model's catalog entry at the prices of p's entry of its
	// pool. Required.
	Priced func(p *job, model string) llmq.Model
	// Ends is how a refused job leaves. Required.
	Ends jobEnds
	Log  *slog.Logger
}

func (c budgetGateConfig) validate() error {
	if c.Tenants == nil || c.Metrics == nil || c.Priced == nil || c.Ends == nil {
		return errors.New("worker: budget gate: Tenants, Metrics, Priced and Ends are required")
	}
	return nil
}

// budgetGate reserves each call's price on the job's budgets before it is
// made and settles it after.
type budgetGate struct {
	cfg budgetGateConfig
}

func newBudgetGate(cfg budgetGateConfig) (*budgetGate, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &budgetGate{cfg: cfg}, nil
}

// gate reserves the price of p's call of model and returns the body
// to send (its output capped past 90% of a budget), or, when the call is
// not to be made (proceed false), the step the job goes on with (stay) or
// false when it left the pipeline.
func (g *budgetGate) gate(p *job, model string, body json.RawMessage) (out json.RawMessage, ev event, stay, proceed bool) {
	capTokens, ok, err := g.reserve(p, model)
	switch {
	case err != nil:
		if g.cfg.Ends.gone(p, "reserve budget", err) || !g.cfg.Ends.pause(p) {
			return nil, event{}, false, false
		}
		return nil, event{Step: stepReady}, true, false
	case !ok:
		return nil, event{}, false, false
	case capTokens > 0:
		if body, err = capOutput(body, capTokens); err != nil {
			g.end(p, model, nil)
			g.cfg.Ends.fail(p, 0, "invalid_body", err.Error())
			return nil, event{}, false, false
		}
	}
	return body, event{}, false, true
}

// budgetsOf is the budgets p's call is charged on: none when the worker
// keeps no budgets or p's tenant and project have none.
func (g *budgetGate) budgetsOf(p *job) []llmq.Budget {
	if g.cfg.Store == nil {
		return nil
	}
	return g.cfg.Tenants().Budgets(p.rec.Tenant, p.rec.Project)
}

// reserveBudget reserves the price of p's call of model on its budgets. It
// returns the output cap to apply to the call (0: none). When the call
// may not go ahead it reports false with a nil error, and the job has left
// the pipeline by its budget's overage policy.
func (g *budgetGate) reserve(p *job, model string) (capTokens int, ok bool, err error) {
	budgets := g.budgetsOf(p)
	if len(budgets) == 0 {
		return 0, true, nil
	}
	outCap := budgets[0].OutputCap
	for _, b := range budgets[1:] {
		outCap = min(outCap, b.OutputCap)
	}
	m := g.cfg.Priced(p, model)
	ctx, cancel := context.WithTimeout(p.ctx, markTimeout)
	defer cancel()
	out, err := g.cfg.Store.ReserveBudget(ctx, store.BudgetReservation{
		// The priority the job asked for, as the claim's hold compares it
		// (a job it does not hold must not be refused over and again).
		Lease: p.lease, Project: p.rec.Project, Low: p.rec.Priority == llmq.PriorityLow,
		CostUSD:       m.Cost(p.req.PromptTokens, p.req.MaxOutputTokens),
		CappedCostUSD: m.Cost(p.req.PromptTokens, min(p.req.MaxOutputTokens, outCap)),
	})
	if err != nil {
		return 0, false, err
	}
	g.alerts(out.Alerts)
	if out.Reserved {
		if out.Capped {
			return out.OutputCap, true, nil
		}
		return 0, true, nil
	}
	g.overBudget(p, out)
	return 0, false, nil
}

// overBudget applies the overage policy of the budget that refused p.
func (g *budgetGate) overBudget(p *job, out store.BudgetOutcome) {
	b := out.Refused
	why := fmt.Sprintf("budget: the %s budget of %s (%.2f USD)", b.Period, budgetScope(b.Tenant, b.Project), b.LimitUSD)
	count := func(outcome string) {
		g.cfg.Metrics.refused.WithLabelValues(b.Tenant, b.Project, outcome).Inc()
	}
	switch {
	case out.Exceeded && b.Overage == llmq.OverageReject:
		count("reject")
		g.cfg.Ends.deadLetter(p, dlq.ReasonBudgetExceeded, why+" is spent")
	case b.Overage == llmq.OverageDegrade && p.job.Deferrable && g.cfg.Degrade:
		count("batch")
		ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), markTimeout)
		defer cancel()
		if err := g.cfg.Store.MoveToBatch(ctx, p.lease, why); err != nil && !g.cfg.Ends.gone(p, "move to batch", err) {
			// Its lease will expire and the reaper hand it back.
			p.log.Warn("move to batch", slog.Any("error", err))
		}
	default:
		count("wait")
		p.log.Debug("waiting for the budget", slog.String("why", why))
		g.cfg.Ends.release(p)
	}
}

// allows reports whether p's budgets have room for a call costing cost:
// settled and reserved spend plus cost within every limit. It reads the
// budgets without reserving (the reservation before the call decides,
// atomically); a read that fails allows nothing.
func (g *budgetGate) allows(p *job, cost float64) bool {
	budgets := g.budgetsOf(p)
	if len(budgets) == 0 {
		return true
	}
	ctx, cancel := context.WithTimeout(p.ctx, markTimeout)
	defer cancel()
	us, err := g.cfg.Store.BudgetUsages(ctx, p.rec.Tenant)
	if err != nil {
		p.log.Warn("read budgets before moving to another key", slog.Any("error", err))
		return false
	}
	for _, b := range budgets {
		for _, u := range us {
			if u.Tenant == b.Tenant && u.Project == b.Project && u.Period == b.Period &&
				u.SpentUSD+u.ReservedUSD+cost > u.LimitUSD {
				return false
			}
		}
	}
	return true
}

// budgetScope names a budget's scope in a message: acme or acme/bulk.
func budgetScope(tenant, project string) string {
	if project == "" {
		return tenant
	}
	return tenant + "/" + project
}

// budgetAlerts sends the thresholds crossed.
func (g *budgetGate) alerts(alerts []store.BudgetAlert) {
	for _, a := range alerts {
		g.cfg.Log.Warn("budget threshold", slog.String("tenant", a.Budget.Tenant), slog.String("project", a.Budget.Project),
			slog.String("period", string(a.Budget.Period)), slog.Int("percent", a.Percent))
		if g.cfg.Alerts != nil {
			g.cfg.Alerts.NotifyBudget(dlq.BudgetAlert{Tenant: a.Budget.Tenant, Project: a.Budget.Project,
				Period: string(a.Budget.Period), PeriodStart: a.PeriodStart, PeriodEnd: a.Budget.Period.End(a.PeriodStart),
				Percent: a.Percent, LimitUSD: a.Budget.LimitUSD, SpentUSD: a.SpentUSD, ReservedUSD: a.ReservedUSD,
				Overage: string(a.Budget.Overage)})
		}
	}
}

// endBudget settles p's reservation to the price of the call's reply
// (success), or gives it back (the call failed or was not made: reply
// nil), retrying database errors until the worker's grace period ends.
func (g *budgetGate) end(p *job, model string, reply *Reply) {
	if len(g.budgetsOf(p)) == 0 {
		return
	}
	what, write := "release budget", func(ctx context.Context) error { return g.cfg.Store.ReleaseBudget(ctx, p.lease) }
	if reply != nil && (reply.Outcome.Class == ClassSuccess || reply.PromptTokens+reply.CompletionTokens > 0) {
		cost := g.cfg.Priced(p, model).Cost(reply.PromptTokens, reply.CompletionTokens)
		what, write = "settle budget", func(ctx context.Context) error { return g.cfg.Store.SettleBudget(ctx, p.lease, cost) }
	}
	// Left to the reaper's sweep if the database stays down.
	_ = g.cfg.Ends.writeOut(p, what, write)
}

// capOutput returns body with its output allowance capped at n tokens:
// max_completion_tokens when the body sets it, else max_tokens.
func capOutput(body json.RawMessage, n int) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	field := "max_tokens"
	if _, ok := m["max_completion_tokens"]; ok {
		field = "max_completion_tokens"
	}
	var have int
	if v, ok := m[field]; ok && json.Unmarshal(v, &have) == nil && have > 0 && have <= n {
		return body, nil
	}
	m[field], _ = json.Marshal(n)
	return json.Marshal(m)
}
