package dlq

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmq/llmq/internal/redact"
)

// Defaults of [AlertConfig].
const (
	// AlertGroupWaitDefault is how long a new burst collects events before
	// its first notification.
	AlertGroupWaitDefault = 10 * time.Second
	// AlertGroupIntervalDefault is the least time between two firing
	// notifications of the same burst.
	AlertGroupIntervalDefault = 5 * time.Minute
	// AlertResolveTimeoutDefault is how long a burst must stay quiet to be
	// resolved.
	AlertResolveTimeoutDefault = 5 * time.Minute
	// AlertMaxPerMinuteDefault is the default limit on notifications in any
	// minute, all bursts together.
	AlertMaxPerMinuteDefault = 10
	// AlertBufferSizeDefault is the default number of events Notify can
	// queue before it drops.
	AlertBufferSizeDefault = 1024
	// AlertSampleSizeDefault is the default number of job ids and models a
	// notification names.
	AlertSampleSizeDefault = 5
	// AlertMaxAttemptsDefault is the default number of delivery attempts of
	// one notification to one sink.
	AlertMaxAttemptsDefault = 5
	// AlertRetryBackoffDefault is the default wait after the first failed
	// attempt; it doubles after each further one.
	AlertRetryBackoffDefault = time.Second
	// AlertRetryMaxBackoffDefault is the default cap of the backoff and of a
	// receiver's Retry-After.
	AlertRetryMaxBackoffDefault = time.Minute
	// AlertSendTimeoutDefault is the default time limit of one attempt.
	AlertSendTimeoutDefault = 10 * time.Second
	// AlertSeverityDefault is the default severity label.
	AlertSeverityDefault = "warning"
)

// AlertName is the alertname label of every dead-letter alert.
const AlertName = "LLMQDeadLetters"

// AlertConfig configures an [Alerter]. The zero value of every field but the
// sink URLs means its default; at least one sink URL is required.
type AlertConfig struct {
	// AlertmanagerURL is the base URL of an Alertmanager (for example
	// http://alertmanager:9093); alerts are POSTed to <url>/api/v2/alerts.
	// Empty: no Alertmanager sink.
	AlertmanagerURL string
	// WebhookURL is the full URL of a JSON webhook that takes the Slack
	// incoming-webhook shape. Empty: no webhook sink.
	WebhookURL string
	// Severity is the severity label of the alerts. Default "warning".
	Severity string

	// GroupWait is how long a new burst collects events before its first
	// notification. Default 10s; -1 sends at once.
	GroupWait time.Duration
	// GroupInterval is the least time between two firing notifications of
	// one burst; events in between are reported together. Default 5m.
	GroupInterval time.Duration
	// ResolveTimeout is how long a burst must stay quiet before it is
	// resolved. Default 5m; must be longer than GroupWait.
	ResolveTimeout time.Duration
	// MaxPerMinute limits notifications (firing and resolved, all bursts,
	// counted once for all sinks) in any minute; over the limit they wait.
	// Default 10; -1 means no limit.
	MaxPerMinute int
	// BufferSize is how many events Notify queues before it drops them.
	// Default 1024.
	BufferSize int
	// SampleSize is how many job ids (the latest) and models a notification
	// names. Default 5.
	SampleSize int

	// MaxAttempts is how many times one notification is offered to one
	// sink before the failure is logged and counted. Default 5; 1 means no
	// retry.
	MaxAttempts int
	// RetryBackoff is the wait after the first failed attempt; it doubles
	// after each further one. Default 1s.
	RetryBackoff time.Duration
	// RetryMaxBackoff caps the backoff and a receiver's Retry-After.
	// Default 1m.
	RetryMaxBackoff time.Duration
	// SendTimeout bounds one attempt (wall clock). Default 10s.
	SendTimeout time.Duration
	// HTTPClient sends the notifications. Default: an http.Client whose
	// Timeout is SendTimeout.
	HTTPClient *http.Client

	// Clock is the time source. Default clockwork.NewRealClock().
	Clock clockwork.Clock
	// Logger receives delivery failures. Default: discard.
	Logger *slog.Logger
	// Registerer receives the llmq_alerts_* metrics. Nil: not registered.
	Registerer prometheus.Registerer
}

// WithDefaults returns a copy of c with every zero field set to its default.
func (c AlertConfig) WithDefaults() AlertConfig {
	c.Severity = cmp.Or(c.Severity, AlertSeverityDefault)
	c.GroupWait = cmp.Or(c.GroupWait, AlertGroupWaitDefault)
	if c.GroupWait < 0 {
		c.GroupWait = 0
	}
	c.GroupInterval = cmp.Or(c.GroupInterval, AlertGroupIntervalDefault)
	c.ResolveTimeout = cmp.Or(c.ResolveTimeout, AlertResolveTimeoutDefault)
	c.MaxPerMinute = cmp.Or(c.MaxPerMinute, AlertMaxPerMinuteDefault)
	c.BufferSize = cmp.Or(c.BufferSize, AlertBufferSizeDefault)
	c.SampleSize = cmp.Or(c.SampleSize, AlertSampleSizeDefault)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, AlertMaxAttemptsDefault)
	c.RetryBackoff = cmp.Or(c.RetryBackoff, AlertRetryBackoffDefault)
	c.RetryMaxBackoff = cmp.Or(c.RetryMaxBackoff, AlertRetryMaxBackoffDefault)
	c.SendTimeout = cmp.Or(c.SendTimeout, AlertSendTimeoutDefault)
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: c.SendTimeout}
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate checks a config that went through WithDefaults.
func (c AlertConfig) validate() error {
	if c.AlertmanagerURL == "" && c.WebhookURL == "" {
		return configError("AlertmanagerURL", "no sink: set AlertmanagerURL, WebhookURL or both")
	}
	if err := validateURL(c.AlertmanagerURL); err != nil {
		return configError("AlertmanagerURL", "%v", err)
	}
	if err := validateURL(c.WebhookURL); err != nil {
		return configError("WebhookURL", "%v", err)
	}
	switch {
	case c.GroupInterval < 0:
		return configError("GroupInterval", "must be positive, got %s", c.GroupInterval)
	case c.ResolveTimeout <= c.GroupWait:
		return configError("ResolveTimeout", "must be longer than GroupWait (%s), got %s", c.GroupWait, c.ResolveTimeout)
	case c.MaxPerMinute < -1:
		return configError("MaxPerMinute", "must be positive or -1, got %d", c.MaxPerMinute)
	case c.BufferSize < 0:
		return configError("BufferSize", "must be positive, got %d", c.BufferSize)
	case c.SampleSize < 0:
		return configError("SampleSize", "must be positive, got %d", c.SampleSize)
	case c.MaxAttempts < 0:
		return configError("MaxAttempts", "must be positive, got %d", c.MaxAttempts)
	case c.RetryBackoff < 0:
		return configError("RetryBackoff", "must be positive, got %s", c.RetryBackoff)
	case c.RetryMaxBackoff < c.RetryBackoff:
		return configError("RetryMaxBackoff", "must be at least RetryBackoff (%s), got %s", c.RetryBackoff, c.RetryMaxBackoff)
	case c.SendTimeout < 0:
		return configError("SendTimeout", "must be positive, got %s", c.SendTimeout)
	}
	return nil
}

// validateURL accepts "" and absolute http(s) URLs with a host.
func validateURL(raw string) error {
	if raw == "" {
		return nil
	}
	// The errors name the URL by its endpoint only: a webhook's path is
	// its secret.
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", redact.Endpoint(raw), withoutURL(err))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%s: %w", redact.Endpoint(raw), errNotHTTP)
	}
	if u.Host == "" {
		return fmt.Errorf("%s: %w", redact.Endpoint(raw), errNoHost)
	}
	return nil
}
