package dlq

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAlerterBudgetAlert: a budget alert goes to every sink at once, not
// grouped with the dead letters, and lapses when its period ends.
func TestAlerterBudgetAlert(t *testing.T) {
	t.Parallel()
	am := newReceiver(t, false)
	hook := newReceiver(t, false)
	b := setup(t, AlertConfig{AlertmanagerURL: am.srv.URL, WebhookURL: hook.srv.URL + "/hook", HTTPClient: am.srv.Client()})
	b.start(t)
	b.alerter.NotifyBudget(BudgetAlert{Tenant: "acme", Project: "bulk", Period: "day",
		PeriodStart: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), PeriodEnd: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
		Percent: 90, LimitUSD: 20, SpentUSD: 17.5, ReservedUSD: 0.5, Overage: "queue"})

	const description = "The day budget of project acme/bulk from 2026-11-30T00:00:00Z is 20.00 USD: 17.5000 spent, " +
		"0.5000 reserved by calls in flight. Its low-priority jobs wait and its calls' output is capped."
	require.JSONEq(t, `[{
		"labels": {"alertname": "LLMQBudget", "severity": "warning", "tenant": "acme", "project": "bulk", "period": "day", "threshold": "90"},
		"annotations": {"summary": "project acme/bulk reached 90% of its day budget (18.00 of 20.00 USD)", "description": "`+description+`"},
		"startsAt": "2026-11-30T02:00:00Z",
		"endsAt": "2026-12-01T00:00:00Z"
	}]`, string(am.next(t).body), "sent with no group wait")
	require.JSONEq(t, `{
		"text": "[BUDGET 90%] project acme/bulk reached 90% of its day budget (18.00 of 20.00 USD)",
		"blocks": [
			{"type": "header", "text": {"type": "plain_text", "text": "[BUDGET 90%] project acme/bulk reached 90% of its day budget (18.00 of 20.00 USD)"}},
			{"type": "section", "text": {"type": "mrkdwn", "text": "`+description+`"}},
			{"type": "context", "elements": [{"type": "mrkdwn", "text": "alertname=LLMQBudget severity=warning tenant=acme project=bulk period=day threshold=90"}]}
		]
	}`, string(hook.next(t).body))
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	require.NoError(t, b.alerter.Stop(ctx))
	require.Equal(t, 1.0, b.sent(SinkWebhook, stateFiring))
	require.Equal(t, 1.0, b.sent(SinkAlertmanager, stateFiring))
}
