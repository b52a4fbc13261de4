package llmq

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"time"
)

// Budgets: a tenant or project may set a daily and a monthly cost limit in
// USD. Spend per (scope, period) is the settled cost of its calls plus the
// reservations of the calls in flight; at 70% an alert goes out once, at
// 90% low-priority jobs wait and the other calls' output is capped, at 100%
// the scope's overage policy applies. docs/design/tenants.md#budgets.

// Overage is what happens to a scope's jobs once its budget is spent.
type Overage string

const (
	// OverageQueue: the jobs wait (waiting_reason budget) until the period
	// rolls over. The default.
	OverageQueue Overage = "queue"
	// OverageReject: the API refuses new jobs of the scope (402) and the
	// jobs already queued are dead-lettered with reason budget_exceeded.
	OverageReject Overage = "reject"
	// OverageDegrade: deferrable jobs move to the Batch API lane (half
	// price) when the worker runs one; the others wait as with queue.
	OverageDegrade Overage = "degrade"
)

// Budget thresholds, as fractions of the limit.
const (
	// BudgetAlertAt: one alert per scope and period.
	BudgetAlertAt = 0.7
	// BudgetHoldAt: low-priority jobs wait (or go to the batch lane under
	// degrade), the others' output allowance is capped, and an alert goes
	// out once.
	BudgetHoldAt = 0.9
)

// OutputCapDefault is the output allowance (max_tokens) of a call of a
// scope past BudgetHoldAt when the scope sets no output_cap.
const OutputCapDefault = 256

// Period is the span a budget counts over, in UTC.
type Period string

const (
	PeriodDay   Period = "day"
	PeriodMonth Period = "month"
)

// Start is the beginning of the period that holds t (UTC midnight, or the
// first of the month).
func (p Period) Start(t time.Time) time.Time {
	t = t.UTC()
	if p == PeriodMonth {
		return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	}
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}

// End is the beginning of the next period after the one that holds t.
func (p Period) End(t time.Time) time.Time {
	if p == PeriodMonth {
		return p.Start(t).AddDate(0, 1, 0)
	}
	return p.Start(t).AddDate(0, 0, 1)
}

// BudgetState is how far a budget is spent: ok, 70, 90 or exceeded.
type BudgetState string

const (
	BudgetOK       BudgetState = "ok"
	Budget70       BudgetState = "70"
	Budget90       BudgetState = "90"
	BudgetExceeded BudgetState = "exceeded"
)

// StateOf is the state of a budget of limit USD with spent settled and
// reserved in flight.
func StateOf(spent, reserved, limit float64) BudgetState {
	used := spent + reserved
	switch {
	case used >= limit:
		return BudgetExceeded
	case used >= BudgetHoldAt*limit:
		return Budget90
	case used >= BudgetAlertAt*limit:
		return Budget70
	}
	return BudgetOK
}

// Budget is one configured cost limit of a scope.
type Budget struct {
	// Tenant, and Project ("" for the tenant's own budget).
	Tenant, Project string
	Period          Period
	LimitUSD        float64
	// Overage is the scope's policy (a project's own, else its tenant's,
	// else OverageQueue).
	Overage Overage
	// OutputCap is the output allowance past BudgetHoldAt.
	OutputCap int
}

// Budgets are the budgets a job of tenant and project passes: the tenant's
// daily and monthly ones, then the project's.
func (ts Tenants) Budgets(tenant, project string) []Budget {
	t, ok := ts[tenant]
	if !ok {
		return nil
	}
	out := t.Scope.budgets(tenant, "", t.Scope)
	if p, ok := t.Projects[project]; ok && project != "" {
		out = append(out, p.budgets(tenant, project, t.Scope)...)
	}
	return out
}

// HasBudgets reports whether any tenant or project sets a budget.
func (ts Tenants) HasBudgets() bool {
	for _, t := range ts {
		if t.DailyCost > 0 || t.MonthlyCost > 0 {
			return true
		}
		for _, p := range t.Projects {
			if p.DailyCost > 0 || p.MonthlyCost > 0 {
				return true
			}
		}
	}
	return false
}

// AllBudgets are every configured budget, by tenant, project and period.
func (ts Tenants) AllBudgets() []Budget {
	var out []Budget
	for _, name := range slices.Sorted(maps.Keys(ts)) {
		t := ts[name]
		out = append(out, t.Scope.budgets(name, "", t.Scope)...)
		for _, p := range slices.Sorted(maps.Keys(t.Projects)) {
			out = append(out, t.Projects[p].budgets(name, p, t.Scope)...)
		}
	}
	return out
}

// budgets are s's daily and monthly budgets; parent is its tenant's scope
// (s itself for a tenant), whose overage policy and output cap it inherits.
func (s Scope) budgets(tenant, project string, parent Scope) []Budget {
	over := Overage(firstNonEmpty(string(s.Overage), string(parent.Overage), string(OverageQueue)))
	limit := s.OutputCap
	if limit == 0 {
		limit = parent.OutputCap
	}
	if limit == 0 {
		limit = OutputCapDefault
	}
	var out []Budget
	for _, b := range []struct {
		p Period
		v float64
	}{{PeriodDay, s.DailyCost}, {PeriodMonth, s.MonthlyCost}} {
		if b.v > 0 {
			out = append(out, Budget{Tenant: tenant, Project: project, Period: b.p, LimitUSD: b.v, Overage: over, OutputCap: limit})
		}
	}
	return out
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// validateBudget checks the budget settings of scope p.
func (s Scope) validateBudget(p string) []error {
	var errs []error
	for _, f := range []struct {
		name string
		v    float64
	}{{"daily_cost", s.DailyCost}, {"monthly_cost", s.MonthlyCost}, {"output_cap", float64(s.OutputCap)}} {
		if !(f.v >= 0 && f.v < math.Inf(1)) {
			errs = append(errs, fmt.Errorf("%s.%s: must be a finite number, not negative (0: none); got %v", p, f.name, f.v))
		}
	}
	switch s.Overage {
	case "", OverageQueue, OverageReject, OverageDegrade:
	default:
		errs = append(errs, fmt.Errorf("%s.overage: %q: want queue, reject or degrade", p, s.Overage))
	}
	return errs
}
