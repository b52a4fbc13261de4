package api

import (
	"cmp"
	"context"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// UsageStore reads what the scopes used (a *store.Budgets is one).
type UsageStore interface {
	// Usage returns the usage of every (tenant, project) with jobs
	// finished today; tenant "" reads every tenant.
	Usage(ctx context.Context, tenant string) ([]store.ScopeUsage, error)
	// BudgetUsages returns the configured budgets of tenant ("" : every
	// tenant) with what they spent and reserved in the current period.
	BudgetUsages(ctx context.Context, tenant string) ([]store.BudgetUsage, error)
}

// ScopeUsage is one scope, a tenant or one of its projects, as GET
// /v1/usage and `llmq usage --json` show it (schema ScopeUsage).
type ScopeUsage struct {
	Tenant string `json:"tenant"`
	// Project is absent for the tenant itself (its jobs that name no
	// project).
	Project string `json:"project,omitempty"`
	// Weight is the scope's weight in the fair share of a binding quota.
	Weight float64 `json:"weight"`
	// Limits are the scope's configured limits.
	Limits     ScopeLimits `json:"limits"`
	LastMinute UsageCount  `json:"last_minute"`
	Today      UsageCount  `json:"today"`
	// Budgets are the scope's cost budgets (daily, monthly), absent when
	// it has none.
	Budgets []ScopeBudget `json:"budgets,omitempty"`
}

// ScopeBudget is one cost budget of a scope in its current period.
type ScopeBudget struct {
	// Period is day or month (UTC); PeriodStart its beginning.
	Period      string    `json:"period"`
	PeriodStart time.Time `json:"period_start"`
	LimitUSD    float64   `json:"limit_usd"`
	// SpentUSD is the settled cost of the scope's calls in the period;
	// ReservedUSD the estimates of its calls in flight.
	SpentUSD    float64 `json:"spent_usd"`
	ReservedUSD float64 `json:"reserved_usd"`
	// State is ok, 70, 90 or exceeded (llmq.StateOf; exceeded too once a
	// call was refused at the budget in the period).
	State string `json:"state"`
	// Overage is the policy past the budget: queue, reject or degrade.
	Overage string `json:"overage"`
	// Holding says which of the scope's jobs wait for the budget: low
	// (the low-priority ones) or all; absent: none.
	Holding string `json:"holding,omitempty"`
}

// ScopeLimits are a scope's configured limits; 0 = none.
type ScopeLimits struct {
	RPM         float64 `json:"rpm"`
	TPM         float64 `json:"tpm"`
	Concurrency int     `json:"concurrency"`
	// Priority is the highest priority the scope's jobs are ordered at;
	// absent: no cap.
	Priority string `json:"priority,omitempty"`
}

// UsageCount is the upstream calls and tokens of the jobs that finished
// in a period.
type UsageCount struct {
	Requests int64 `json:"requests"`
	Tokens   int64 `json:"tokens"`
}

// UsageList lists the scopes in view with their usage: tenant's (its own
// and its projects') or, for "", every tenant's, configured or with jobs
// finished today; by tenant, then project.
func UsageList(ts llmq.Tenants, tenant string, used []store.ScopeUsage, budgets []store.BudgetUsage) List[ScopeUsage] {
	type key struct{ tenant, project string }
	scopes := map[key]*ScopeUsage{}
	add := func(tenant, project string) *ScopeUsage {
		k := key{tenant, project}
		if s, ok := scopes[k]; ok {
			return s
		}
		cfg := ts[tenant].Scope
		if project != "" {
			cfg = ts[tenant].Projects[project]
		}
		s := &ScopeUsage{Tenant: tenant, Project: project, Weight: cmp.Or(cfg.Weight, llmq.WeightDefault),
			Limits: ScopeLimits{RPM: cfg.RPM, TPM: cfg.TPM, Concurrency: cfg.Concurrency, Priority: string(cfg.Priority)}}
		scopes[k] = s
		return s
	}
	for name, t := range ts {
		if tenant != "" && name != tenant {
			continue
		}
		add(name, "")
		for p := range t.Projects {
			add(name, p)
		}
	}
	if tenant != "" {
		add(tenant, "")
	}
	for _, u := range used {
		if tenant != "" && u.Tenant != tenant {
			continue // never another tenant's, whatever the store answered
		}
		s := add(u.Tenant, u.Project)
		s.LastMinute = UsageCount{Requests: u.MinuteRequests, Tokens: u.MinuteTokens}
		s.Today = UsageCount{Requests: u.DayRequests, Tokens: u.DayTokens}
	}
	for _, b := range budgets {
		if tenant != "" && b.Tenant != tenant {
			continue
		}
		s := add(b.Tenant, b.Project)
		s.Budgets = append(s.Budgets, ScopeBudget{Period: string(b.Period), PeriodStart: b.PeriodStart, LimitUSD: b.LimitUSD,
			SpentUSD: b.SpentUSD, ReservedUSD: b.ReservedUSD, State: string(b.State), Overage: string(b.Overage), Holding: b.Hold})
	}
	keys := slices.SortedFunc(maps.Keys(scopes), func(a, b key) int {
		return cmp.Or(cmp.Compare(a.tenant, b.tenant), cmp.Compare(a.project, b.project))
	})
	out := make([]ScopeUsage, len(keys))
	for i, k := range keys {
		out[i] = *scopes[k]
	}
	return NewList(out, "")
}

// usageHandler serves GET /v1/usage.
type usageHandler struct {
	replies
	store UsageStore
	// tenants are the tenants applied now (API.tenants).
	tenants func() llmq.Tenants
}

// usage answers GET /v1/usage: the scopes in view, their limits, what
// they used in the last minute and today, and their budgets.
func (uh *usageHandler) usage(w http.ResponseWriter, r *http.Request) {
	s, _ := scopeOf(r)
	used, err := uh.store.Usage(r.Context(), s.tenant)
	if err != nil {
		uh.internalError(w, r, err)
		return
	}
	budgets, err := uh.store.BudgetUsages(r.Context(), s.tenant)
	if err != nil {
		uh.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, UsageList(uh.tenants(), s.tenant, used, budgets))
}
