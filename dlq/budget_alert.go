package dlq

import (
	"fmt"
	"strings"
	"time"
)

// BudgetAlertName is the alertname label of a budget alert.
const BudgetAlertName = "LLMQBudget"

// BudgetAlert is a cost budget of a tenant or project that crossed a
// threshold (70, 90 or 100 percent) for the first time in its period
// (docs/design/tenants.md#budgets). The worker decides it once per scope
// and period, in Postgres; the alerter sends it at once to every sink,
// without grouping.
type BudgetAlert struct {
	Tenant string
	// Project is "" for the tenant's own budget.
	Project string
	// Period is day or month; PeriodStart its start and PeriodEnd the
	// next one's (the alert lapses then).
	Period                 string
	PeriodStart, PeriodEnd time.Time
	Percent                int
	// LimitUSD is the budget; SpentUSD what its settled calls cost and
	// ReservedUSD the estimates of its calls in flight at the crossing.
	LimitUSD, SpentUSD, ReservedUSD float64
	// Overage is the scope's policy past 100%.
	Overage string
}

// NotifyBudget hands a budget alert to the alerter. It never blocks: when
// the buffer is full the alert is dropped and counted in
// llmq_alerts_dropped_total.
func (a *Alerter) NotifyBudget(b BudgetAlert) {
	select {
	case a.events <- arrival{budget: &b, at: a.cfg.Clock.Now()}:
	default:
		a.dropped.Inc()
	}
}

// budgetNotification is the notification of budget alert b, taken at at.
func budgetNotification(b *BudgetAlert, at time.Time) notification {
	return notification{State: stateFiring, Tenant: b.Tenant, Budget: b, StartsAt: at, EndsAt: b.PeriodEnd}
}

func (b *BudgetAlert) scope() string {
	if b.Project == "" {
		return "tenant " + b.Tenant
	}
	return "project " + b.Tenant + "/" + b.Project
}

func (b *BudgetAlert) summary() string {
	return fmt.Sprintf("%s reached %d%% of its %s budget (%.2f of %.2f USD)", b.scope(), b.Percent, b.Period,
		b.SpentUSD+b.ReservedUSD, b.LimitUSD)
}

func (b *BudgetAlert) description() string {
	var then string
	switch {
	case b.Percent >= 100:
		then = "Its overage policy applies: " + b.Overage + "."
	case b.Percent >= 90:
		then = "Its low-priority jobs wait and its calls' output is capped."
	default:
		then = "At 90% its low-priority jobs will wait."
	}
	return fmt.Sprintf("The %s budget of %s from %s is %.2f USD: %.4f spent, %.4f reserved by calls in flight. %s",
		b.Period, b.scope(), b.PeriodStart.UTC().Format(time.RFC3339), b.LimitUSD, b.SpentUSD, b.ReservedUSD, then)
}

func budgetAlertmanagerPayload(n notification, severity string) alertmanagerAlert {
	b := n.Budget
	return alertmanagerAlert{
		Labels: map[string]string{
			"alertname": BudgetAlertName,
			"severity":  severity,
			"tenant":    b.Tenant,
			"project":   b.Project,
			"period":    b.Period,
			"threshold": fmt.Sprint(b.Percent),
		},
		Annotations: map[string]string{"summary": b.summary(), "description": b.description()},
		StartsAt:    n.StartsAt.UTC(),
		EndsAt:      n.EndsAt.UTC(),
	}
}

func budgetWebhookPayload(n notification, severity string) webhookMessage {
	b := n.Budget
	title := "[BUDGET " + fmt.Sprint(b.Percent) + "%] " + b.summary()
	return webhookMessage{
		Text: mrkdwnEscape(title),
		Blocks: []webhookBlock{
			{Type: "header", Text: &webhookText{Type: "plain_text", Text: title}},
			{Type: "section", Text: &webhookText{Type: "mrkdwn", Text: mrkdwnEscape(b.description())}},
			{Type: "context", Elements: []webhookText{{
				Type: "mrkdwn",
				Text: mrkdwnEscape(strings.Join([]string{"alertname=" + BudgetAlertName, "severity=" + severity,
					"tenant=" + b.Tenant, "project=" + b.Project, "period=" + b.Period, fmt.Sprintf("threshold=%d", b.Percent)}, " ")),
			}}},
		},
	}
}
