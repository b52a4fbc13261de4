package api

import (
	"context"
	"fmt"
	"time"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/producer"
)

// CodeBudgetExceeded is the error code of a job refused because a budget
// of its tenant or project is spent and its overage policy is reject.
const CodeBudgetExceeded = "budget_exceeded"

// budgetRefusal returns the error of the first job whose scope has a
// rejecting budget that is spent (docs/design/tenants.md#budgets), nil
// when every job may be recorded. batch: the jobs came as {"jobs": [...]}
// (field paths jobs[i]). A failed read of the budgets is
// producer.ErrDatabaseUnavailable.
func (ad *admission) budgetRefusal(ctx context.Context, jobs []*llmq.Job, batch bool) (*Error, error) {
	if ad.usage == nil {
		return nil, nil
	}
	read := map[string][]budgetState{}
	for i, j := range jobs {
		var rejecting bool
		for _, b := range ad.tenants().Budgets(j.Tenant, j.Project) {
			rejecting = rejecting || b.Overage == llmq.OverageReject
		}
		if !rejecting {
			continue
		}
		states, ok := read[j.Tenant]
		if !ok {
			us, err := ad.usage.BudgetUsages(ctx, j.Tenant)
			if err != nil {
				// Postgres away: the request is refused as a publish
				// would be (503, Retry-After), nothing recorded.
				return nil, fmt.Errorf("%w: read budgets: %w", producer.ErrDatabaseUnavailable, err)
			}
			for _, u := range us {
				states = append(states, budgetState{b: u.Budget, spent: u.SpentUSD + u.ReservedUSD, exceeded: u.State == llmq.BudgetExceeded,
					until: u.Period.End(u.PeriodStart)})
			}
			read[j.Tenant] = states
		}
		for _, s := range states {
			if !s.exceeded || s.b.Overage != llmq.OverageReject || (s.b.Project != "" && s.b.Project != j.Project) {
				continue
			}
			field := "project"
			if batch {
				field = fmt.Sprintf("jobs[%d].project", i)
			}
			scope := "tenant " + s.b.Tenant
			if s.b.Project != "" {
				scope = "project " + s.b.Tenant + "/" + s.b.Project
			}
			return &Error{Code: CodeBudgetExceeded, Field: field, Message: fmt.Sprintf(
				"the %s budget of %s (%.2f USD) is spent (%.2f USD spent or reserved); its overage policy is reject: "+
					"new jobs are refused until %s", s.b.Period, scope, s.b.LimitUSD, s.spent, s.until.Format(time.RFC3339))}, nil
		}
	}
	return nil, nil
}

// budgetState is what budgetRefusal needs of one budget.
type budgetState struct {
	b        llmq.Budget
	spent    float64
	exceeded bool
	until    time.Time
}
