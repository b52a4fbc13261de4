package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gopkg.in/yaml.v3"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/redact"
)

// Environment variables read by Load.
const (
	EnvDatabaseURL   = "LLMQ_DATABASE_URL"
	EnvBroker        = "LLMQ_BROKER"
	EnvOpenAIBaseURL = "OPENAI_BASE_URL"
	EnvOpenAIAPIKey  = "OPENAI_API_KEY"
	EnvConfig        = "LLMQ_CONFIG"
	EnvAPIKeys       = "LLMQ_API_KEYS"
)

// Defaults.
const (
	// DatabaseURLDefault is the Postgres database of the local services;
	// `llmq migrate` creates it when missing.
	DatabaseURLDefault = "postgres://postgres@127.0.0.1:5432/llmq?sslmode=disable"
	// BrokerDefault is the local RabbitMQ with queue llmq.jobs.
	BrokerDefault = "amqp://guest:guest@127.0.0.1:5672/?queue=llmq.jobs"
	// OpenAIBaseURLDefault is the local upstream simulator (`llmq sim`).
	OpenAIBaseURLDefault = "http://127.0.0.1:8081/v1"
	// OpenAIAPIKeyDefault is the key the simulator accepts.
	OpenAIAPIKeyDefault = "sk-llmq-local"
	// MaxMessageBytesDefault limits an encoded job (1 MiB).
	MaxMessageBytesDefault = llmq.MaxMessageBytesDefault

	// RetryMaxAttemptsDefault is the number of upstream attempts of one job
	// (first call included) before it is dead-lettered.
	RetryMaxAttemptsDefault = 6
	// RetryBaseDelayDefault caps the jitter window of the first retry.
	RetryBaseDelayDefault = 500 * time.Millisecond
	// RetryMaxDelayDefault caps any backoff.
	RetryMaxDelayDefault = 30 * time.Second
	// RetryBudgetDefault is how many retries each successful call earns
	// (a retry budget bounds retry storms).
	RetryBudgetDefault = 0.5
	// RetryFallbackAfterDefault is how many 429s a model gets before a job
	// moves to its next fallback model.
	RetryFallbackAfterDefault = 3
	// RetryFallbackMaxWaitDefault is the longest rate-limit wait (a
	// Retry-After, or the model's lane paused by 429s) a job with a
	// fallback sits out before it moves on at once.
	RetryFallbackMaxWaitDefault = 2 * time.Second

	// BatchWindowDefault is the off-peak window in which deferrable jobs go
	// to the provider's Batch API.
	BatchWindowDefault = "22:00-06:00"
	// BatchTimezoneDefault is the time zone of the batch window.
	BatchTimezoneDefault = "UTC"
	// BatchDrainThresholdDefault: outside the window, deferrable jobs still
	// go to the Batch API when the live backlog would take longer than this
	// to drain.
	BatchDrainThresholdDefault = 30 * time.Minute
	// BatchFlushIntervalDefault is how long the collector waits before it
	// submits a partial batch.
	BatchFlushIntervalDefault = time.Minute
	// BatchMaxLinesDefault is the provider's limit on requests per batch.
	BatchMaxLinesDefault = 50000

	// SoftDepthDefault is the queue depth from which producers are told to
	// slow down.
	SoftDepthDefault = 10000
	// HardDepthDefault is the queue depth from which the API refuses new
	// jobs (429 with Retry-After).
	HardDepthDefault = 100000
)

// Strategies the strategy setting accepts ("" picks shape when a model's
// quota is known and adaptive when not).
var Strategies = []string{"retry", "rpm", "shape", "adaptive"}

// Config is the whole configuration.
type Config struct {
	// DatabaseURL is the Postgres URL (LLMQ_DATABASE_URL, --database-url).
	DatabaseURL string `yaml:"-"`
	// Broker is LLMQ_BROKER (--broker) parsed.
	Broker Broker `yaml:"-"`
	// OpenAIBaseURL (OPENAI_BASE_URL, --openai-base-url) and OpenAIAPIKey
	// (OPENAI_API_KEY, --openai-api-key) address the upstream.
	OpenAIBaseURL string `yaml:"-"`
	OpenAIAPIKey  string `yaml:"-"`
	// Path is the YAML file read (LLMQ_CONFIG, --config); "" for none.
	Path string `yaml:"-"`

	// Models maps a model name to its quota, prices and fallbacks (the
	// model catalog). A model not listed runs with unknown quotas (adaptive
	// shaping).
	Models map[string]llmq.Model `yaml:"models"`
	// Strategy is the shaping strategy: retry, rpm, shape or adaptive; ""
	// (default) picks shape for models with a quota, adaptive otherwise.
	Strategy string `yaml:"strategy"`
	// Retry is the retry policy.
	Retry Retry `yaml:"retry"`
	// Batch configures the Batch API lane.
	Batch Batch `yaml:"batch"`
	// APIKeys maps an HTTP API key to its tenant: the YAML api_keys with
	// LLMQ_API_KEYS (--api-keys) entries added over them. Empty: the API
	// refuses every request.
	APIKeys map[string]string `yaml:"api_keys"`
	// Backpressure thresholds on queue depth.
	Backpressure Backpressure `yaml:"backpressure"`
	// Alerts names the dead-letter alert sinks; both empty: no alerts.
	Alerts Alerts `yaml:"alerts"`
	// MaxMessageBytes limits an encoded job. 0 means
	// MaxMessageBytesDefault; -1 means no limit.
	MaxMessageBytes int `yaml:"max_message_bytes"`
}

// Retry is the retry policy. Zero fields mean their defaults.
type Retry struct {
	// MaxAttempts counts every upstream attempt; default
	// RetryMaxAttemptsDefault.
	MaxAttempts int `yaml:"max_attempts"`
	// BaseDelay and MaxDelay bound the exponential backoff with jitter;
	// defaults RetryBaseDelayDefault and RetryMaxDelayDefault.
	BaseDelay time.Duration `yaml:"base_delay"`
	MaxDelay  time.Duration `yaml:"max_delay"`
	// Budget is the retries each successful call earns; default
	// RetryBudgetDefault.
	Budget float64 `yaml:"budget"`
	// FallbackAfter and FallbackMaxWait decide when a rate-limited job
	// moves to its next fallback model; defaults RetryFallbackAfterDefault
	// and RetryFallbackMaxWaitDefault.
	FallbackAfter   int           `yaml:"fallback_after"`
	FallbackMaxWait time.Duration `yaml:"fallback_max_wait"`
}

// Batch configures the Batch API lane. Zero fields mean their defaults.
type Batch struct {
	// Window is the daily off-peak window "HH:MM-HH:MM" (it may wrap
	// midnight); default BatchWindowDefault. "off" disables the window
	// (only the drain threshold routes jobs to batches).
	Window string `yaml:"window"`
	// Timezone is an IANA zone name; default BatchTimezoneDefault.
	Timezone string `yaml:"timezone"`
	// DrainThreshold: default BatchDrainThresholdDefault.
	DrainThreshold time.Duration `yaml:"drain_threshold"`
	// FlushInterval: default BatchFlushIntervalDefault.
	FlushInterval time.Duration `yaml:"flush_interval"`
	// MaxLines is the most jobs per batch; default BatchMaxLinesDefault.
	MaxLines int `yaml:"max_lines"`

	start, end int // minutes after midnight; start == end: no window
	loc        *time.Location
}

// InWindow reports whether t falls inside the off-peak window. The Batch
// must come from a validated Config.
func (b Batch) InWindow(t time.Time) bool {
	if b.start == b.end || b.loc == nil {
		return false
	}
	lt := t.In(b.loc)
	m := lt.Hour()*60 + lt.Minute()
	if b.start < b.end {
		return m >= b.start && m < b.end
	}
	return m >= b.start || m < b.end
}

// Location is the window's time zone (UTC before validation).
func (b Batch) Location() *time.Location { return cmp.Or(b.loc, time.UTC) }

// Backpressure thresholds; zero fields mean their defaults.
type Backpressure struct {
	// SoftDepth: default SoftDepthDefault.
	SoftDepth int64 `yaml:"soft_depth"`
	// HardDepth: default HardDepthDefault; must exceed SoftDepth.
	HardDepth int64 `yaml:"hard_depth"`
}

// Alerts configures the dead-letter alerts (package dlq). Zero fields
// other than the URLs mean the dlq package's defaults.
type Alerts struct {
	// AlertmanagerURL is an Alertmanager base URL; "" for none.
	AlertmanagerURL string `yaml:"alertmanager_url"`
	// WebhookURL is a JSON (Slack-shaped) webhook URL; "" for none.
	WebhookURL string `yaml:"webhook_url"`
	// Severity is the alerts' severity label (dlq default "warning").
	Severity string `yaml:"severity"`
	// GroupWait, GroupInterval and ResolveTimeout shape alert bursts
	// (dlq defaults 10s, 5m, 5m).
	GroupWait      time.Duration `yaml:"group_wait"`
	GroupInterval  time.Duration `yaml:"group_interval"`
	ResolveTimeout time.Duration `yaml:"resolve_timeout"`
	// MaxPerMinute caps notifications (dlq default 10).
	MaxPerMinute int `yaml:"max_per_minute"`
}

// Flags are the command-line overrides; empty fields do not override.
type Flags struct {
	DatabaseURL   string
	Broker        string
	Config        string
	OpenAIBaseURL string
	OpenAIAPIKey  string
	APIKeys       string
}

// Load builds the configuration from getenv (os.Getenv in production), the
// YAML file it names and flags, applies defaults and validates. Errors name
// the setting and match ErrInvalid (file read errors excepted).
func Load(getenv func(string) string, flags Flags) (*Config, error) {
	pick := func(flag, env string) string { return cmp.Or(flag, getenv(env)) }
	c := &Config{}
	c.Path = pick(flags.Config, EnvConfig)
	if c.Path != "" {
		data, err := os.ReadFile(c.Path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvConfig, err)
		}
		if err := c.parseYAML(data); err != nil {
			return nil, err
		}
	}
	c.DatabaseURL = pick(flags.DatabaseURL, EnvDatabaseURL)
	c.OpenAIBaseURL = pick(flags.OpenAIBaseURL, EnvOpenAIBaseURL)
	c.OpenAIAPIKey = pick(flags.OpenAIAPIKey, EnvOpenAIAPIKey)
	brokerURL := cmp.Or(pick(flags.Broker, EnvBroker), BrokerDefault)
	var errs []error
	b, err := ParseBroker(brokerURL)
	if err != nil {
		errs = append(errs, fmt.Errorf("%w: %s: %w", ErrInvalid, EnvBroker, err))
	}
	c.Broker = b
	if keys := pick(flags.APIKeys, EnvAPIKeys); keys != "" {
		m, err := ParseAPIKeys(keys)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %s: %w", ErrInvalid, EnvAPIKeys, err))
		}
		if c.APIKeys == nil {
			c.APIKeys = map[string]string{}
		}
		maps.Copy(c.APIKeys, m)
	}
	c.WithDefaults()
	if err := c.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// parseYAML reads the file's settings; unknown keys are errors.
func (c *Config) parseYAML(data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: %s %s: %w", ErrInvalid, EnvConfig, c.Path, err)
	}
	return nil
}

// WithDefaults fills every zero setting with its default and returns c.
func (c *Config) WithDefaults() *Config {
	c.DatabaseURL = cmp.Or(c.DatabaseURL, DatabaseURLDefault)
	if c.Broker.Kind == "" {
		c.Broker, _ = ParseBroker(BrokerDefault)
	}
	c.OpenAIBaseURL = cmp.Or(c.OpenAIBaseURL, OpenAIBaseURLDefault)
	c.OpenAIAPIKey = cmp.Or(c.OpenAIAPIKey, OpenAIAPIKeyDefault)
	c.MaxMessageBytes = cmp.Or(c.MaxMessageBytes, MaxMessageBytesDefault)
	c.Retry.MaxAttempts = cmp.Or(c.Retry.MaxAttempts, RetryMaxAttemptsDefault)
	c.Retry.BaseDelay = cmp.Or(c.Retry.BaseDelay, RetryBaseDelayDefault)
	c.Retry.MaxDelay = cmp.Or(c.Retry.MaxDelay, RetryMaxDelayDefault)
	c.Retry.Budget = cmp.Or(c.Retry.Budget, RetryBudgetDefault)
	c.Retry.FallbackAfter = cmp.Or(c.Retry.FallbackAfter, RetryFallbackAfterDefault)
	c.Retry.FallbackMaxWait = cmp.Or(c.Retry.FallbackMaxWait, RetryFallbackMaxWaitDefault)
	c.Batch.Window = cmp.Or(c.Batch.Window, BatchWindowDefault)
	c.Batch.Timezone = cmp.Or(c.Batch.Timezone, BatchTimezoneDefault)
	c.Batch.DrainThreshold = cmp.Or(c.Batch.DrainThreshold, BatchDrainThresholdDefault)
	c.Batch.FlushInterval = cmp.Or(c.Batch.FlushInterval, BatchFlushIntervalDefault)
	c.Batch.MaxLines = cmp.Or(c.Batch.MaxLines, BatchMaxLinesDefault)
	c.Backpressure.SoftDepth = cmp.Or(c.Backpressure.SoftDepth, SoftDepthDefault)
	c.Backpressure.HardDepth = cmp.Or(c.Backpressure.HardDepth, HardDepthDefault)
	if c.APIKeys == nil {
		c.APIKeys = map[string]string{}
	}
	return c
}

// Validate checks every setting (call WithDefaults first) and prepares the
// parsed forms (batch window). The error names each failing setting.
func (c *Config) Validate() error {
	var errs []error
	bad := func(setting, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalid, setting, fmt.Sprintf(format, args...)))
	}
	if _, err := pgconn.ParseConfig(c.DatabaseURL); err != nil {
		bad(EnvDatabaseURL, "%v", err)
	}
	if err := checkURL(c.OpenAIBaseURL, "http", "https"); err != nil {
		bad(EnvOpenAIBaseURL, "%v", err)
	}
	if c.Strategy != "" && !slices.Contains(Strategies, c.Strategy) {
		bad("strategy", "unknown strategy %q (want %s)", c.Strategy, strings.Join(Strategies, ", "))
	}
	if c.MaxMessageBytes < -1 {
		bad("max_message_bytes", "must be positive, or -1 for no limit")
	}
	for _, name := range slices.Sorted(maps.Keys(c.Models)) {
		m := c.Models[name]
		p := "models." + name
		if strings.TrimSpace(name) == "" {
			bad("models", "a model name is empty")
		}
		for field, v := range map[string]float64{"rpm": m.RPM, "tpm": m.TPM, "concurrency": float64(m.Concurrency),
			"context_window": float64(m.ContextWindow), "max_output_default": float64(m.MaxOutputDefault)} {
			if v < 0 {
				bad(p+"."+field, "must not be negative; got %v", v)
			}
		}
		if m.InputPricePer1M < 0 {
			bad(p+".input_price_per_1m", "must not be negative")
		}
		if m.OutputPricePer1M < 0 {
			bad(p+".output_price_per_1m", "must not be negative")
		}
		if m.BatchDiscount < 0 || m.BatchDiscount > 1 {
			bad(p+".batch_discount", "must be in (0, 1] (0: the default, %v); got %v", llmq.BatchDiscountDefault, m.BatchDiscount)
		}
		for i, f := range m.Fallbacks {
			if strings.TrimSpace(f) == "" || f == name {
				bad(fmt.Sprintf("%s.fallbacks[%d]", p, i), "must name another model; got %q", f)
			}
		}
	}
	if c.Retry.MaxAttempts < 1 {
		bad("retry.max_attempts", "must be at least 1")
	}
	if c.Retry.BaseDelay <= 0 {
		bad("retry.base_delay", "must be positive")
	}
	if c.Retry.MaxDelay < c.Retry.BaseDelay {
		bad("retry.max_delay", "must be at least retry.base_delay (%v)", c.Retry.BaseDelay)
	}
	if c.Retry.Budget < 0 {
		bad("retry.budget", "must not be negative")
	}
	if c.Retry.FallbackAfter < 1 {
		bad("retry.fallback_after", "must be at least 1")
	}
	if c.Retry.FallbackMaxWait <= 0 {
		bad("retry.fallback_max_wait", "must be positive")
	}
	loc, err := time.LoadLocation(c.Batch.Timezone)
	if err != nil {
		bad("batch.timezone", "unknown time zone %q", c.Batch.Timezone)
	} else {
		c.Batch.loc = loc
	}
	if start, end, err := parseWindow(c.Batch.Window); err != nil {
		bad("batch.window", "%v", err)
	} else {
		c.Batch.start, c.Batch.end = start, end
	}
	if c.Batch.DrainThreshold < 0 {
		bad("batch.drain_threshold", "must not be negative")
	}
	if c.Batch.FlushInterval <= 0 {
		bad("batch.flush_interval", "must be positive")
	}
	if c.Batch.MaxLines < 1 || c.Batch.MaxLines > BatchMaxLinesDefault {
		bad("batch.max_lines", "must be in 1..%d; got %d", BatchMaxLinesDefault, c.Batch.MaxLines)
	}
	for _, k := range slices.Sorted(maps.Keys(c.APIKeys)) {
		if k == "" || !validTenant(c.APIKeys[k]) {
			bad("api_keys", "key %q must map to a tenant of 1-128 characters of [A-Za-z0-9._:-]", redact.Key(k))
		}
	}
	if c.Backpressure.SoftDepth < 1 {
		bad("backpressure.soft_depth", "must be positive")
	}
	if c.Backpressure.HardDepth <= c.Backpressure.SoftDepth {
		bad("backpressure.hard_depth", "must exceed backpressure.soft_depth (%d)", c.Backpressure.SoftDepth)
	}
	if c.Alerts.AlertmanagerURL != "" {
		if err := checkURL(c.Alerts.AlertmanagerURL, "http", "https"); err != nil {
			bad("alerts.alertmanager_url", "%v", err)
		}
	}
	if c.Alerts.GroupWait < 0 || c.Alerts.GroupInterval < 0 || c.Alerts.ResolveTimeout < 0 || c.Alerts.MaxPerMinute < 0 {
		bad("alerts", "group_wait, group_interval, resolve_timeout and max_per_minute must not be negative")
	}
	if c.Alerts.WebhookURL != "" {
		if err := checkURL(c.Alerts.WebhookURL, "http", "https"); err != nil {
			bad("alerts.webhook_url", "%v", err)
		}
	}
	return errors.Join(errs...)
}

// parseWindow reads "HH:MM-HH:MM" as minutes after midnight; "off" is no
// window (start == end).
func parseWindow(s string) (start, end int, err error) {
	if s == "off" {
		return 0, 0, nil
	}
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, fmt.Errorf("%q is not HH:MM-HH:MM", s)
	}
	start, err1 := parseClock(a)
	end, err2 := parseClock(b)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("%q is not HH:MM-HH:MM", s)
	}
	if start == end {
		return 0, 0, fmt.Errorf("%q is empty (use \"off\" for no window)", s)
	}
	return start, end, nil
}

func parseClock(s string) (int, error) {
	t, err := time.Parse("15:04", strings.TrimSpace(s))
	if err != nil {
		if strings.TrimSpace(s) == "24:00" {
			return 0, nil
		}
		return 0, err
	}
	return t.Hour()*60 + t.Minute(), nil
}

// ParseAPIKeys reads "key1:tenantA,key2:tenantB".
func ParseAPIKeys(s string) (map[string]string, error) {
	out := map[string]string{}
	for i, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		key, tenant, ok := strings.Cut(entry, ":")
		if !ok || key == "" || !validTenant(tenant) {
			return nil, fmt.Errorf("entry %d (%q) is not key:tenant with a tenant of [A-Za-z0-9._:-]", i+1, redact.Key(key)+":"+tenant)
		}
		out[key] = tenant
	}
	return out, nil
}

func validTenant(t string) bool { return llmq.ValidID(t) }
