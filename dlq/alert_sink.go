package dlq

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/llmq/llmq/internal/redact"
)

// Sink names, the sink label of the llmq_alerts_* metrics.
const (
	SinkAlertmanager = "alertmanager"
	SinkWebhook      = "webhook"
)

// maxErrorLen bounds the last error quoted in a notification.
const maxErrorLen = 500

// sink renders a notification for one receiver and posts it.
type sink struct {
	name string
	url  string
	// endpoint is url without its path, for errors and logs: a webhook's
	// path is its secret.
	endpoint string
	render   func(notification) ([]byte, error)
}

// newSinks returns the sinks c configures, Alertmanager first.
func newSinks(c AlertConfig) []sink {
	var sinks []sink
	if c.AlertmanagerURL != "" {
		sinks = append(sinks, sink{
			name:     SinkAlertmanager,
			url:      strings.TrimSuffix(c.AlertmanagerURL, "/") + "/api/v2/alerts",
			endpoint: redact.Endpoint(c.AlertmanagerURL),
			render: func(n notification) ([]byte, error) {
				if n.Budget != nil {
					return json.Marshal([]alertmanagerAlert{budgetAlertmanagerPayload(n, c.Severity)})
				}
				return json.Marshal([]alertmanagerAlert{alertmanagerPayload(n, c.Severity)})
			},
		})
	}
	if c.WebhookURL != "" {
		sinks = append(sinks, sink{
			name:     SinkWebhook,
			url:      c.WebhookURL,
			endpoint: redact.Endpoint(c.WebhookURL),
			render: func(n notification) ([]byte, error) {
				if n.Budget != nil {
					return json.Marshal(budgetWebhookPayload(n, c.Severity))
				}
				return json.Marshal(webhookPayload(n, c.Severity))
			},
		})
	}
	return sinks
}

// post sends one attempt. A non-2xx answer is a *DeliveryError.
func (s sink) post(ctx context.Context, client *http.Client, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("dlq: %s request to %s: %w", s.name, s.endpoint, withoutURL(err))
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("dlq: post to %s %s: %w", s.name, s.endpoint, withoutURL(err))
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 == 2 {
		return nil
	}
	derr := &DeliveryError{Sink: s.name, StatusCode: resp.StatusCode, Body: redact.Text(string(head), 512)}
	if secs, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && secs > 0 {
		derr.RetryAfter = time.Duration(secs) * time.Second
	}
	return derr
}

// withoutURL drops the URL a *url.Error repeats (a webhook's secret path),
// keeping the operation and the cause.
func withoutURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}

// alertmanagerAlert is one element of the Alertmanager API v2
// postableAlerts body.
type alertmanagerAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    time.Time         `json:"startsAt"`
	EndsAt      time.Time         `json:"endsAt"`
}

func alertmanagerPayload(n notification, severity string) alertmanagerAlert {
	return alertmanagerAlert{
		Labels: map[string]string{
			"alertname": AlertName,
			"severity":  severity,
			"reason":    string(n.Reason),
			"tenant":    n.Tenant,
		},
		Annotations: map[string]string{
			"summary":     summary(n),
			"description": description(n),
		},
		StartsAt: n.StartsAt.UTC(),
		EndsAt:   n.EndsAt.UTC(),
	}
}

// webhookMessage is the Slack incoming-webhook shape: text is the
// fallback for notifications, blocks the rich rendering.
type webhookMessage struct {
	Text   string         `json:"text"`
	Blocks []webhookBlock `json:"blocks"`
}

type webhookBlock struct {
	Type string       `json:"type"`
	Text *webhookText `json:"text,omitempty"`
	// Elements is used by context blocks.
	Elements []webhookText `json:"elements,omitempty"`
}

type webhookText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// webhookPayload renders n for Slack. Every text Slack reads as mrkdwn
// (the notification text, the section, the context) is escaped: a model
// name, a tenant, a job id or an upstream error comes from outside and
// must not mention a channel (<!channel>), link (<url|text>) or user.
// The header is plain_text, which Slack does not parse.
func webhookPayload(n notification, severity string) webhookMessage {
	title := fmt.Sprintf("[%s] %s", strings.ToUpper(string(n.State)), summary(n))
	return webhookMessage{
		Text: mrkdwnEscape(title),
		Blocks: []webhookBlock{
			{Type: "header", Text: &webhookText{Type: "plain_text", Text: title}},
			{Type: "section", Text: &webhookText{Type: "mrkdwn", Text: mrkdwnEscape(description(n))}},
			{Type: "context", Elements: []webhookText{{
				Type: "mrkdwn",
				Text: mrkdwnEscape(fmt.Sprintf("alertname=%s severity=%s reason=%s tenant=%s", AlertName, severity, n.Reason, n.Tenant)),
			}}},
		},
	}
}

// mrkdwnEscaper escapes the three characters Slack's mrkdwn gives a
// meaning to: with them escaped no text can form a mention, a link or a
// special command.
var mrkdwnEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

func mrkdwnEscape(s string) string { return mrkdwnEscaper.Replace(s) }

func summary(n notification) string {
	noun := "jobs"
	if n.Count == 1 {
		noun = "job"
	}
	if n.State == stateResolved {
		return fmt.Sprintf("dead letters stopped: %d %s of tenant %s dead-lettered (%s)", n.Count, noun, n.Tenant, n.Reason)
	}
	return fmt.Sprintf("%d %s of tenant %s dead-lettered (%s)", n.Count, noun, n.Tenant, n.Reason)
}

func description(n notification) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d dead letters with reason %s for tenant %s between %s and %s.",
		n.Count, n.Reason, n.Tenant, n.FirstAt.UTC().Format(time.RFC3339), n.LastAt.UTC().Format(time.RFC3339))
	if len(n.Models) > 0 {
		fmt.Fprintf(&b, " Models: %s.", strings.Join(n.Models, ", "))
	}
	fmt.Fprintf(&b, " Sample job ids: %s.", strings.Join(n.SampleIDs, ", "))
	if n.LastError != "" {
		fmt.Fprintf(&b, " Last error: %s", redact.Text(n.LastError, maxErrorLen))
	}
	return b.String()
}
