package llmq_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
)

func TestTenantsPriorityCaps(t *testing.T) {
	t.Parallel()
	ts := llmq.Tenants{
		"acme": {Scope: llmq.Scope{Priority: llmq.PriorityNormal},
			Projects: map[string]llmq.Scope{"bulk": {Priority: llmq.PriorityLow}, "free": {}}},
		"open": {},
	}
	for _, tc := range []struct {
		tenant, project string
		asked, want     llmq.Priority
	}{
		{"acme", "", llmq.PriorityHigh, llmq.PriorityNormal},
		{"acme", "", llmq.PriorityLow, llmq.PriorityLow},
		{"acme", "bulk", llmq.PriorityHigh, llmq.PriorityLow},
		{"acme", "free", llmq.PriorityHigh, llmq.PriorityNormal},
		{"acme", "unlisted", llmq.PriorityHigh, llmq.PriorityNormal},
		{"open", "", llmq.PriorityHigh, llmq.PriorityHigh},
		{"unlisted", "", llmq.PriorityHigh, llmq.PriorityHigh},
	} {
		j := &llmq.Job{Tenant: tc.tenant, Project: tc.project, Priority: tc.asked}
		require.Equal(t, tc.want, ts.Priority(j), "%s/%s asking %s", tc.tenant, tc.project, tc.asked)
	}
}

func TestTenantsBudgets(t *testing.T) {
	t.Parallel()
	ts := llmq.Tenants{
		"acme": {Scope: llmq.Scope{DailyCost: 50, MonthlyCost: 1000, Overage: llmq.OverageReject},
			Projects: map[string]llmq.Scope{"bulk": {DailyCost: 5, OutputCap: 64}, "free": {MonthlyCost: 9, Overage: llmq.OverageDegrade}}},
		"open": {},
	}
	day, month := llmq.PeriodDay, llmq.PeriodMonth
	require.Equal(t, []llmq.Budget{
		{Tenant: "acme", Period: day, LimitUSD: 50, Overage: llmq.OverageReject, OutputCap: llmq.OutputCapDefault},
		{Tenant: "acme", Period: month, LimitUSD: 1000, Overage: llmq.OverageReject, OutputCap: llmq.OutputCapDefault},
		{Tenant: "acme", Project: "bulk", Period: day, LimitUSD: 5, Overage: llmq.OverageReject, OutputCap: 64},
	}, ts.Budgets("acme", "bulk"), "a project inherits its tenant's policy")
	require.Equal(t, llmq.OverageDegrade, ts.Budgets("acme", "free")[2].Overage)
	require.Len(t, ts.Budgets("acme", "unlisted"), 2)
	require.Empty(t, ts.Budgets("open", ""))
	require.Empty(t, ts.Budgets("unlisted", ""))
	require.Len(t, ts.AllBudgets(), 4)
	require.Equal(t, llmq.OverageQueue, llmq.Tenants{"q": {Scope: llmq.Scope{DailyCost: 1}}}.Budgets("q", "")[0].Overage)
}

func TestBudgetStateAndPeriods(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		spent, reserved float64
		want            llmq.BudgetState
	}{{0, 0, llmq.BudgetOK}, {60, 9.99, llmq.BudgetOK}, {60, 10, llmq.Budget70}, {89, 1, llmq.Budget90},
		{99, 0.5, llmq.Budget90}, {99, 1, llmq.BudgetExceeded}, {120, 0, llmq.BudgetExceeded}} {
		require.Equal(t, tc.want, llmq.StateOf(tc.spent, tc.reserved, 100), "%v + %v of 100", tc.spent, tc.reserved)
	}
	at := time.Date(2026, 12, 31, 23, 59, 0, 0, time.FixedZone("x", 3600))
	require.Equal(t, time.Date(2026, 12, 31, 0, 0, 0, 0, time.UTC), llmq.PeriodDay.Start(at))
	require.Equal(t, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), llmq.PeriodDay.End(at))
	require.Equal(t, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), llmq.PeriodMonth.Start(at))
	require.Equal(t, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), llmq.PeriodMonth.End(at))
}

// TestTenantsCheckProject: a tenant that lists projects takes jobs of
// those (or of none) only, unless it allows unknown projects; a tenant that
// lists none, or is not configured, takes any.
func TestTenantsCheckProject(t *testing.T) {
	t.Parallel()
	ts := llmq.Tenants{
		"acme":  {Projects: map[string]llmq.Scope{"bulk": {}, "free": {}}},
		"loose": {Projects: map[string]llmq.Scope{"bulk": {}}, AllowUnknownProjects: true},
		"open":  {},
	}
	for _, tc := range []struct {
		tenant, project string
		refused         bool
	}{
		{"acme", "bulk", false}, {"acme", "", false}, {"acme", "other", true},
		{"loose", "other", false}, {"open", "other", false}, {"unlisted", "other", false},
	} {
		errs := ts.CheckProject(&llmq.Job{Tenant: tc.tenant, Project: tc.project})
		if !tc.refused {
			require.Empty(t, errs, "%s/%s", tc.tenant, tc.project)
			continue
		}
		require.Equal(t, []llmq.FieldError{{Field: "project", Code: llmq.CodeUnknownProject,
			Message: `tenant "acme" has no project "other"; its projects: bulk, free`}}, errs)
	}
	many := llmq.Tenants{"t": {Projects: map[string]llmq.Scope{}}}
	for i := range 12 {
		many["t"].Projects[fmt.Sprintf("p%02d", i)] = llmq.Scope{}
	}
	require.Equal(t, `tenant "t" has no project "x"; its projects: p00, p01, p02, p03, p04, p05, p06, p07, p08, p09, and 2 more`,
		many.CheckProject(&llmq.Job{Tenant: "t", Project: "x"})[0].Message)
}
