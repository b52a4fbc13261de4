package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gopkg.in/yaml.v3"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/redact"
	"github.com/llmq/llmq/shaping"
)

// Environment variables read by Load.
const (
	EnvDatabaseURL   = "LLMQ_DATABASE_URL"
	EnvBroker        = "LLMQ_BROKER"
	EnvOpenAIBaseURL = "OPENAI_BASE_URL"
	EnvOpenAIAPIKey  = "OPENAI_API_KEY"
	EnvConfig        = "LLMQ_CONFIG"
	EnvAPIKeys       = "LLMQ_API_KEYS"
	// EnvOperatorKeys lists the operator keys, comma-separated, each
	// "name=key" or a bare key (OperatorKey).
	EnvOperatorKeys = "LLMQ_OPERATOR_KEYS"
	// EnvConsoleSecret seals the web console's session cookies.
	EnvConsoleSecret = "LLMQ_CONSOLE_SECRET"
)

// FileSuffix names the variable that gives a secret setting's file instead
// of its value (OPENAI_API_KEY_FILE, LLMQ_API_KEYS_FILE,
// LLMQ_OPERATOR_KEYS_FILE, LLMQ_CONSOLE_SECRET_FILE,
// LLMQ_DATABASE_URL_FILE, LLMQ_BROKER_FILE; a mounted Secret), so that no
// key has to be a flag, which ps shows to every user of the machine. The
// file's content, trimmed of surrounding white space, is the value.
const FileSuffix = "_FILE"

// Defaults of the settings no component owns: where the services are.
// Every other setting's zero value means the default of the component that
// reads it (worker, batchapi, producer, dlq, llmq), which exports it.
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
)

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
	// model catalog). It is also the allowlist: when it lists models, a job
	// that names another (body.model or a fallback) that is neither listed
	// nor a listed model's fallback is refused, unless AllowAnyModel. Empty: every name is allowed, with unknown quotas
	// (adaptive shaping).
	Models map[string]llmq.Model `yaml:"models"`
	// Pools are the models served by several upstreams (pools.go): per
	// model, its entries in order of preference. A job goes to the first
	// entry with headroom and moves to another before any fallback model.
	// Empty: every model calls OpenAIBaseURL with OpenAIAPIKey.
	Pools map[string][]PoolEntry `yaml:"pools"`
	// AllowAnyModel lets jobs name models that Models does not list; they
	// run with unknown quotas. Default false.
	AllowAnyModel bool `yaml:"allow_any_model"`
	// Strategy is the shaping strategy: retry, rpm, shape or adaptive; ""
	// (default) picks shape for models with a quota, adaptive otherwise;
	// a model without the quota rpm or shape needs runs adaptive.
	Strategy string `yaml:"strategy"`
	// Retry is the retry policy.
	Retry Retry `yaml:"retry"`
	// Ingest is how the worker takes jobs from the broker into Postgres.
	Ingest Ingest `yaml:"ingest"`
	// Upstream is how the worker reads the upstream's answers.
	Upstream Upstream `yaml:"upstream"`
	// Batch configures the Batch API lane.
	Batch Batch `yaml:"batch"`
	// APIKeys maps an HTTP API key to its tenant: the YAML api_keys with
	// LLMQ_API_KEYS (--api-keys) entries added over them. Empty: the API
	// refuses every request.
	APIKeys map[string]string `yaml:"api_keys"`
	// OperatorKeys are the HTTP API keys of operators, each with its name
	// in the audit log: the YAML operator_keys with the LLMQ_OPERATOR_KEYS
	// entries (name1=key1,key2) added. An operator key is bound to no
	// tenant: it sees every tenant's jobs, dead letters and batches and
	// may act on all of them. Empty: no operator.
	OperatorKeys []OperatorKey `yaml:"operator_keys"`
	// ConsoleSecret (LLMQ_CONSOLE_SECRET, environment only) seals the web
	// console's session cookies, so that every API replica behind one
	// address accepts the sessions of the others. At least
	// ConsoleSecretMinBytes bytes. "": a random secret per process
	// (sessions end when the process does).
	ConsoleSecret string `yaml:"-"`
	// Tenants are the tenants and their projects: weights in the fair
	// share of a binding provider quota, priority caps and quota layers.
	// Empty: every tenant has weight 1 and no quota of its own.
	Tenants llmq.Tenants `yaml:"tenants"`
	// Backpressure thresholds on queue depth.
	Backpressure Backpressure `yaml:"backpressure"`
	// Alerts names the dead-letter alert sinks; both empty: no alerts.
	Alerts Alerts `yaml:"alerts"`
	// Gateway tunes gateway mode (POST /v1/chat/completions on llmq api).
	Gateway Gateway `yaml:"gateway"`
	// RateLimits bounds the requests at llmq api's door.
	RateLimits RateLimits `yaml:"rate_limits"`
	// Retention is how long finished rows are kept.
	Retention Retention `yaml:"retention"`
	// Capacity is the capacity normalisation the worker reports.
	Capacity Capacity `yaml:"capacity"`
	// Notifications is where result events go besides Postgres
	// (docs/design/notifications.md).
	Notifications Notifications `yaml:"notifications"`
	// MaxMessageBytes limits an encoded job. 0 means
	// llmq.MaxMessageBytesDefault; -1 means no limit.
	MaxMessageBytes int `yaml:"max_message_bytes"`

	// fromFile maps a variable whose value Load read from its _FILE
	// variable to that variable and path, for the errors to name.
	fromFile map[string]string
}

// Retry is the retry policy of the worker. Zero fields mean the worker's
// defaults.
type Retry struct {
	// MaxAttempts counts every upstream attempt; 0 = worker.MaxAttemptsDefault.
	MaxAttempts int `yaml:"max_attempts"`
	// BaseDelay and MaxDelay bound the exponential backoff with jitter;
	// 0 = worker.BackoffBaseDefault and worker.BackoffMaxDefault.
	BaseDelay time.Duration `yaml:"base_delay"`
	MaxDelay  time.Duration `yaml:"max_delay"`
	// Budget is the retries each successful call earns;
	// 0 = worker.RetryBudgetRatioDefault.
	Budget float64 `yaml:"budget"`
	// FallbackAfter and FallbackMaxWait decide when a rate-limited job
	// moves to its next fallback model; 0 = worker.FallbackAfterDefault and
	// worker.FallbackMaxWaitDefault.
	FallbackAfter   int           `yaml:"fallback_after"`
	FallbackMaxWait time.Duration `yaml:"fallback_max_wait"`
	// FallbackOn lists the failures that move a job to its next fallback
	// model: FallbackRateLimit, FallbackServerError, FallbackTimeout.
	// Empty = [rate_limit] (a 429 only: a fallback model rarely helps with a
	// provider's 5xx).
	FallbackOn []string `yaml:"fallback_on"`
	// MaxRetryAfter caps how long a server's Retry-After is honoured, in a
	// job's backoff and in its model's pause after a 429;
	// 0 = worker.BackoffMaxRetryAfterDefault.
	MaxRetryAfter time.Duration `yaml:"max_retry_after"`
	// The provider-incident breaker of each model's lane (worker.Config's
	// Incident* fields); 0 = the worker's defaults, incident_min_calls -1
	// turns it off.
	IncidentMinCalls     int           `yaml:"incident_min_calls"`
	IncidentFailureRatio float64       `yaml:"incident_failure_ratio"`
	IncidentWindow       time.Duration `yaml:"incident_window"`
	IncidentProbeEvery   time.Duration `yaml:"incident_probe_every"`
	// OutageLimit is how long into a provider outage the calls that fail
	// for it cost their jobs no attempt (worker.Config.OutageLimit);
	// 0 = worker.OutageLimitDefault, negative (-1s) = every call counts.
	OutageLimit time.Duration `yaml:"outage_limit"`
}

// Capacity configures the capacity normalisation (worker.Config's
// Capacity* fields, docs/design/quotas.md): a model's allocatable
// capacity = its limit x health x safety - its limit x reserved. Zero
// fields mean the worker's defaults.
type Capacity struct {
	// Safety is the safety factor, in (0, 1]; 0 = worker.CapacitySafetyDefault.
	Safety float64 `yaml:"safety"`
	// Reserved is the share of the limit kept for high-priority work and
	// retries, in [0, 1); 0 = worker.CapacityReservedDefault, -1 = none.
	Reserved float64 `yaml:"reserved"`
	// TailLatency is the p95 latency of a model's calls above which its
	// health factor falls; 0 = worker.CapacityTailLatencyDefault.
	TailLatency time.Duration `yaml:"tail_latency"`
}

// Ingest configures the worker's ingest. Zero fields mean the worker's
// defaults.
// Notifications configures the result events of jobs with a route.
type Notifications struct {
	// ResultsTopic is the deployment's results topic (Kafka) or queue
	// (RabbitMQ): where the result event of every job that names no reply
	// of its own goes. "" (default): only jobs with a reply get one.
	ResultsTopic string `yaml:"results_topic"`
	// TenantReplies overrides ResultsTopic per tenant: a results topic
	// ("to") and a webhook ("webhook", https) for the tenant's jobs that
	// name no reply of their own. Imported into the database on the first
	// start, which is their source after it (the admin API changes them).
	TenantReplies map[string]llmq.Reply `yaml:"tenant_replies"`
	// RetryFor is how long a result event is retried before it ends dead
	// (notification_undeliverable); 0 = 24 h.
	RetryFor time.Duration `yaml:"retry_for"`
	// WebhookSecrets are the Standard Webhooks signing secrets per tenant
	// ("*": every other tenant), "whsec_" + base64: one, or two while
	// rotating (deliveries are signed with both). A tenant without one
	// gets no webhook delivered (its events end dead). Imported into the
	// database on the first start, as TenantReplies.
	WebhookSecrets map[string][]string `yaml:"webhook_secrets"`
	// AllowPrivateWebhooks lets webhooks reach loopback, private and
	// link-local addresses. Default false: refused at dial time, so that
	// a job cannot make the worker call inside its network.
	AllowPrivateWebhooks bool `yaml:"allow_private_webhooks"`
}

type Ingest struct {
	// Window: ingestion pauses while Postgres holds this many queued jobs,
	// so the overflow stays in the broker; 0 = worker.IngestWindowDefault,
	// -1 = no window.
	Window int `yaml:"window"`
	// TenantCap: the most jobs one tenant may hold queued or in flight
	// from ingest, its messages past it dead-lettered tenant_queue_full;
	// 0 = worker.TenantCapDefault (100,000), -1 = no cap.
	TenantCap int `yaml:"tenant_cap"`
	// SizeOrder: the queued jobs go shortest first when the
	// model's TPM is configured, a job sorting as if recorded this many
	// times its estimated tokens' time at the TPM later; 0 =
	// worker.SizeOrderDefault (50), -1 = first come, first served.
	SizeOrder float64 `yaml:"size_order"`
}

// Upstream configures how the worker reads the upstream's answers. Zero
// fields mean the worker's defaults.
type Upstream struct {
	// MaxResponseBytes bounds the body of one answer, success or error, as
	// read (gzip inflated): a larger answer fails its job for good
	// (response_too_large); 0 = worker.MaxResponseBytesDefault (8 MiB),
	// -1 = no bound.
	MaxResponseBytes int64 `yaml:"max_response_bytes"`
	// NameCalls sends each call's job id and tenant upstream
	// (worker.HeaderJob, worker.HeaderTenant). Default false: a provider
	// learns nothing of the tenants' names unless the deployment asks.
	NameCalls bool `yaml:"name_calls"`
}

// The failures retry.fallback_on may name.
const (
	// FallbackRateLimit: the model stays rate limited (429).
	FallbackRateLimit = "rate_limit"
	// FallbackServerError: the model answers 5xx.
	FallbackServerError = "server_error"
	// FallbackTimeout: the call to the model times out.
	FallbackTimeout = "timeout"
)

// FallbackOnValues are the values of retry.fallback_on.
var FallbackOnValues = []string{FallbackRateLimit, FallbackServerError, FallbackTimeout}

// Batch configures the Batch API lane. Zero fields mean batchapi's
// defaults; the lane parses and checks the window and the zone.
type Batch struct {
	// Window is the daily off-peak window "HH:MM-HH:MM" (it may wrap
	// midnight); "" = batchapi.WindowDefault; "off" disables the window
	// (only the drain threshold routes jobs to batches).
	Window string `yaml:"window"`
	// Timezone is an IANA zone name; "" = batchapi.TimezoneDefault.
	Timezone string `yaml:"timezone"`
	// DrainThreshold: 0 = batchapi.DrainThresholdDefault.
	DrainThreshold time.Duration `yaml:"drain_threshold"`
	// FlushInterval: 0 = batchapi.FlushIntervalDefault.
	FlushInterval time.Duration `yaml:"flush_interval"`
	// MaxLines is the most jobs per batch; 0 = batchapi.MaxLinesDefault
	// (also the maximum).
	MaxLines int `yaml:"max_lines"`
}

// Backpressure thresholds of the producer; zero fields mean its defaults.
type Backpressure struct {
	// SoftDepth: 0 = producer.SoftDepthDefault.
	SoftDepth int64 `yaml:"soft_depth"`
	// HardDepth: 0 = producer.HardDepthDefault; it must exceed SoftDepth.
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

// Gateway tunes gateway mode; zero fields mean the API's defaults.
type Gateway struct {
	// Timeout is a call's deadline when the request gives none (neither
	// X-LLMQ-Deadline nor the SDKs' X-Stainless-Timeout); 0 =
	// api.GatewayTimeoutDefault (10m).
	Timeout time.Duration `yaml:"timeout"`
	// Priority is a call's priority without X-LLMQ-Priority: high, normal
	// or low; "" = normal.
	Priority llmq.Priority `yaml:"priority"`
	// CancelOnDisconnect cancels the job of a caller that disconnects
	// before its upstream call began. Default false: the job completes and
	// stays readable through GET /v1/jobs/{id}.
	CancelOnDisconnect bool `yaml:"cancel_on_disconnect"`
	// MaxDeadline is the furthest a call's deadline may be (an
	// X-LLMQ-Deadline past it is refused, an X-Stainless-Timeout cut to
	// it); 0 = api.GatewayMaxDeadlineDefault (30m).
	MaxDeadline time.Duration `yaml:"max_deadline"`
	// MaxWaiting is the calls one tenant may have waiting at once; 0 =
	// api.GatewayMaxWaitingDefault (256), -1 = no limit.
	MaxWaiting int `yaml:"max_waiting"`
}

// RateLimits bounds the requests at the API's door; zero fields mean the
// API's defaults (api.RateLimitConfig), -1 no limit.
type RateLimits struct {
	// KeyRPM is the requests per minute of one API key.
	KeyRPM int `yaml:"key_rpm"`
	// TenantRPM is the requests per minute of one tenant, all its keys.
	TenantRPM int `yaml:"tenant_rpm"`
	// AuthFailuresPerMinute is the failed authentications allowed per
	// minute from one client address.
	AuthFailuresPerMinute int `yaml:"auth_failures_per_minute"`
	// TrustedProxyHeader names the header in which the proxy in front of
	// the API gives the client's address (its last entry); "": the peer.
	TrustedProxyHeader string `yaml:"trusted_proxy_header"`
	// MaxClients bounds the client addresses remembered.
	MaxClients int `yaml:"max_clients"`
}

// Retention is how long finished rows are kept (package retention); zero
// fields mean its defaults, a negative period keeps those rows forever.
type Retention struct {
	// Succeeded: succeeded jobs and their results, after they finished.
	Succeeded time.Duration `yaml:"succeeded"`
	// Unsuccessful: failed, dead-lettered, expired and cancelled jobs.
	Unsuccessful time.Duration `yaml:"unsuccessful"`
	// DeadLetters: dead letters, after they were recorded.
	DeadLetters time.Duration `yaml:"dead_letters"`
	// Batches: provider batches, after they were ingested.
	Batches time.Duration `yaml:"batches"`
	// Tombstones: the key a pruned job leaves, which keeps a late
	// duplicate of its message from being run again.
	Tombstones time.Duration `yaml:"tombstones"`
	// Audit: the tenancy's audit log (who changed which tenant, project
	// or key), after the change.
	Audit time.Duration `yaml:"audit"`
	// Interval is the time between prunes.
	Interval time.Duration `yaml:"interval"`
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
	var errs []error
	pick := func(flag, env string) string { return cmp.Or(flag, getenv(env)) }
	// pickSecret also reads env's _FILE variable.
	c := &Config{fromFile: map[string]string{}}
	pickSecret := func(flag, env string) string {
		v, err := secretValue(getenv, flag, env)
		if err != nil {
			errs = append(errs, err)
		}
		if path := getenv(env + FileSuffix); flag == "" && path != "" {
			c.fromFile[env] = fmt.Sprintf("%s%s (%s)", env, FileSuffix, path)
		}
		return v
	}
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
	c.DatabaseURL = pickSecret(flags.DatabaseURL, EnvDatabaseURL)
	c.OpenAIBaseURL = pick(flags.OpenAIBaseURL, EnvOpenAIBaseURL)
	c.OpenAIAPIKey = pickSecret(flags.OpenAIAPIKey, EnvOpenAIAPIKey)
	brokerURL := cmp.Or(pickSecret(flags.Broker, EnvBroker), BrokerDefault)
	b, err := ParseBroker(brokerURL)
	if err != nil {
		errs = append(errs, fmt.Errorf("%w: %s: %w", ErrInvalid, c.source(EnvBroker), err))
	}
	c.Broker = b
	if keys := pickSecret(flags.APIKeys, EnvAPIKeys); keys != "" {
		m, err := ParseAPIKeys(keys)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %s: %w", ErrInvalid, c.source(EnvAPIKeys), err))
		}
		if c.APIKeys == nil {
			c.APIKeys = map[string]string{}
		}
		maps.Copy(c.APIKeys, m)
	}
	if keys := pickSecret("", EnvOperatorKeys); keys != "" {
		c.OperatorKeys = append(c.OperatorKeys, ParseOperatorKeys(keys)...)
	}
	c.ConsoleSecret = pickSecret("", EnvConsoleSecret)
	errs = append(errs, c.resolvePoolKeys(getenv)...)
	c.WithDefaults()
	if err := c.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// secretValue is the flag when given, else the variable env, else the
// content of the file env_FILE names; both variables set is an error.
func secretValue(getenv func(string) string, flag, env string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	v, path := getenv(env), getenv(env+FileSuffix)
	switch {
	case path == "":
		return v, nil
	case v != "":
		return "", fmt.Errorf("%w: %s and %s are both set: set one", ErrInvalid, env, env+FileSuffix)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		// The error names the file, never its content.
		return "", fmt.Errorf("%w: %s: %w", ErrInvalid, env+FileSuffix, err)
	}
	return strings.TrimSpace(string(data)), nil
}

// source names where the setting of variable env came from: env, or its
// _FILE variable and the file's path.
func (c *Config) source(env string) string { return cmp.Or(c.fromFile[env], env) }

// parseYAML reads the file's settings; unknown keys are errors.
func (c *Config) parseYAML(data []byte) error {
	if err := DecodeYAML(data, c); err != nil {
		return fmt.Errorf("%w: %s %s: %w", ErrInvalid, EnvConfig, c.Path, err)
	}
	return nil
}

// DecodeYAML decodes the YAML document data into v (a pointer to a
// struct), refusing unknown keys. The syntax, unknown keys and values of
// the wrong kind are checked first on the document's nodes
// (yamlerrors.go), for errors with the right line and the setting's path.
func DecodeYAML(data []byte, v any) error {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return errors.New(yamlSyntaxError(err))
	}
	if problems := checkYAML(&root, reflect.TypeOf(v)); len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n  "))
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// Catalog is the model catalog of the settings: Models, allowing only them
// unless AllowAnyModel (or none are listed).
func (c *Config) Catalog() llmq.Catalog {
	return llmq.Catalog{Models: c.Models, AllowAny: c.AllowAnyModel}
}

// WithDefaults fills the settings no component owns (database, broker,
// upstream) with their defaults and returns c. The other zero settings stay
// zero: the components apply their own defaults.
func (c *Config) WithDefaults() *Config {
	c.DatabaseURL = cmp.Or(c.DatabaseURL, DatabaseURLDefault)
	if c.Broker.Kind == "" {
		c.Broker, _ = ParseBroker(BrokerDefault)
	}
	c.OpenAIBaseURL = cmp.Or(c.OpenAIBaseURL, OpenAIBaseURLDefault)
	c.OpenAIAPIKey = cmp.Or(c.OpenAIAPIKey, OpenAIAPIKeyDefault)
	if c.APIKeys == nil {
		c.APIKeys = map[string]string{}
	}
	c.poolDefaults()
	return c
}

// Validate checks every setting it can check alone (call WithDefaults
// first); zero means the component's default and is accepted. The checks
// that need a component (the batch window's grammar, a limit against a
// component's default) are app.Check's. The error names each failing
// setting.
func (c *Config) Validate() error {
	var errs []error
	bad := func(setting, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalid, setting, fmt.Sprintf(format, args...)))
	}
	if err := checkDatabaseURL(c.DatabaseURL); err != nil {
		bad(c.source(EnvDatabaseURL), "%v", err)
	}
	if err := checkURL(c.OpenAIBaseURL, redact.URL, "http", "https"); err != nil {
		bad(EnvOpenAIBaseURL, "%v", err)
	}
	if _, err := shaping.ParseStrategy(c.Strategy); err != nil {
		bad("strategy", "%v", err)
	}
	if c.MaxMessageBytes < -1 {
		bad("max_message_bytes", "must be positive, or -1 for no limit")
	}
	c.validateModels(bad)
	c.validateRetry(bad)
	c.validateServing(bad)
	for _, k := range slices.Sorted(maps.Keys(c.APIKeys)) {
		if k == "" || !validTenant(c.APIKeys[k]) {
			bad("api_keys", "key %q must map to a tenant of 1-128 characters of [A-Za-z0-9._:-]", redact.Key(k))
		}
	}
	c.validatePools(bad)
	for _, err := range c.Tenants.Validate("tenants") {
		errs = append(errs, fmt.Errorf("%w: %w", ErrInvalid, err))
	}
	c.validateAccess(bad)
	c.validateAlerts(bad)
	c.validateNotifications(bad)
	return errors.Join(errs...)
}

// validateModels checks the models: quotas, prices and fallbacks
// (llmq.ValidateModels, which every other writer of models applies too).
func (c *Config) validateModels(bad func(setting, format string, args ...any)) {
	for _, err := range llmq.ValidateModels("models", c.Models, c.AllowAnyModel) {
		setting, msg, _ := strings.Cut(err.Error(), ": ")
		bad(setting, "%s", msg)
	}
}

// validateRetry checks the retry, batch, backpressure, incident and capacity settings.
func (c *Config) validateRetry(bad func(setting, format string, args ...any)) {
	for _, f := range []struct {
		setting string
		v       float64
	}{
		{"retry.max_attempts", float64(c.Retry.MaxAttempts)}, {"retry.base_delay", float64(c.Retry.BaseDelay)},
		{"retry.max_delay", float64(c.Retry.MaxDelay)}, {"retry.budget", c.Retry.Budget},
		{"retry.fallback_after", float64(c.Retry.FallbackAfter)}, {"retry.fallback_max_wait", float64(c.Retry.FallbackMaxWait)},
		{"retry.max_retry_after", float64(c.Retry.MaxRetryAfter)},
		{"batch.drain_threshold", float64(c.Batch.DrainThreshold)}, {"batch.flush_interval", float64(c.Batch.FlushInterval)},
		{"batch.max_lines", float64(c.Batch.MaxLines)},
		{"backpressure.soft_depth", float64(c.Backpressure.SoftDepth)}, {"backpressure.hard_depth", float64(c.Backpressure.HardDepth)},
	} {
		if f.v < 0 {
			bad(f.setting, "must not be negative (0: the default)")
		}
	}
	for i, v := range c.Retry.FallbackOn {
		if !slices.Contains(FallbackOnValues, v) {
			bad(fmt.Sprintf("retry.fallback_on[%d]", i), "%q: want %s", v, strings.Join(FallbackOnValues, ", "))
		}
	}
	if r := c.Retry; r.IncidentMinCalls < -1 || r.IncidentFailureRatio < 0 || r.IncidentFailureRatio > 1 || r.IncidentWindow < 0 || r.IncidentProbeEvery < 0 {
		bad("retry.incident_*", "incident_min_calls must be -1 (off) or more, incident_failure_ratio in [0, 1], "+
			"incident_window and incident_probe_every not negative (0: the defaults)")
	}
	if k := c.Capacity; k.Safety < 0 || k.Safety > 1 || !(k.Reserved == -1 || k.Reserved >= 0 && k.Reserved < 1) || k.TailLatency < 0 {
		bad("capacity", "safety must be in [0, 1], reserved -1 (none) or in [0, 1), tail_latency not negative (0: the defaults)")
	}
}

// validateServing checks retention, the gateway, the rate limits, the upstream and ingest.
func (c *Config) validateServing(bad func(setting, format string, args ...any)) {
	if c.Retention.Interval < 0 {
		bad("retention.interval", "%v: must not be negative", c.Retention.Interval)
	}
	if t := c.Retention.Tombstones; t > 0 && t < 24*time.Hour {
		bad("retention.tombstones", "%v: a tombstone must outlive the broker's retention (at least 24h; -1 keeps them forever)", t)
	}
	if c.Gateway.Timeout < 0 {
		bad("gateway.timeout", "must not be negative (0: the default)")
	}
	if c.Gateway.MaxDeadline < 0 {
		bad("gateway.max_deadline", "must not be negative (0: the default)")
	}
	if c.Gateway.MaxDeadline > 0 && c.Gateway.Timeout > c.Gateway.MaxDeadline {
		bad("gateway.timeout", "%v: must not pass gateway.max_deadline (%v)", c.Gateway.Timeout, c.Gateway.MaxDeadline)
	}
	for _, l := range []struct {
		name string
		v    int
	}{{"gateway.max_waiting", c.Gateway.MaxWaiting}, {"rate_limits.key_rpm", c.RateLimits.KeyRPM},
		{"rate_limits.tenant_rpm", c.RateLimits.TenantRPM}, {"rate_limits.auth_failures_per_minute", c.RateLimits.AuthFailuresPerMinute}} {
		if l.v < -1 {
			bad(l.name, "must not be negative (0: the default, -1: no limit); got %d", l.v)
		}
	}
	if c.RateLimits.MaxClients < 0 {
		bad("rate_limits.max_clients", "must not be negative (0: the default); got %d", c.RateLimits.MaxClients)
	}
	if c.Gateway.Priority != "" && !c.Gateway.Priority.Valid() {
		bad("gateway.priority", "%q: want high, normal or low", c.Gateway.Priority)
	}
	if c.Upstream.MaxResponseBytes < -1 {
		bad("upstream.max_response_bytes", "must not be negative (0: the default, -1: no bound); got %d", c.Upstream.MaxResponseBytes)
	}
	if c.Ingest.Window < -1 {
		bad("ingest.window", "must not be negative (0: the default, -1: no window); got %d", c.Ingest.Window)
	}
	if c.Ingest.TenantCap < -1 {
		bad("ingest.tenant_cap", "must not be negative (0: the default, -1: no cap); got %d", c.Ingest.TenantCap)
	}
	if so := c.Ingest.SizeOrder; !(so >= 0 && so <= 1000) && so != -1 {
		bad("ingest.size_order", "must be between 0 and 1000 (0: the default, -1: first come, first served); got %v", so)
	}
}

// validateAccess checks the operator keys and the console secret.
func (c *Config) validateAccess(bad func(setting, format string, args ...any)) {
	c.validateOperatorKeys(bad)
	if c.ConsoleSecret != "" && len(c.ConsoleSecret) < ConsoleSecretMinBytes {
		bad(c.source(EnvConsoleSecret), "must be at least %d bytes (e.g. openssl rand -hex 32); got %d", ConsoleSecretMinBytes, len(c.ConsoleSecret))
	}
}

// validateAlerts checks the alert sinks and their timing.
// validateNotifications checks the tenants' replies and webhook secrets.
func (c *Config) validateNotifications(bad func(setting, format string, args ...any)) {
	n := c.Notifications
	if n.RetryFor < 0 {
		bad("notifications.retry_for", "must not be negative")
	}
	for _, tenant := range slices.Sorted(maps.Keys(n.TenantReplies)) {
		r := n.TenantReplies[tenant]
		r.CorrelationID, r.Headers = "", nil
		if err := r.Validate(); err != nil {
			bad("notifications.tenant_replies."+tenant, "%v", err)
		}
	}
	for _, tenant := range slices.Sorted(maps.Keys(n.WebhookSecrets)) {
		if k := len(n.WebhookSecrets[tenant]); k < 1 || k > 2 {
			bad("notifications.webhook_secrets."+tenant, "want one secret, or two while rotating; got %d", k)
		}
	}
}

func (c *Config) validateAlerts(bad func(setting, format string, args ...any)) {
	if c.Alerts.AlertmanagerURL != "" {
		if err := checkURL(c.Alerts.AlertmanagerURL, redact.URL, "http", "https"); err != nil {
			bad("alerts.alertmanager_url", "%v", err)
		}
	}
	if c.Alerts.GroupWait < 0 || c.Alerts.GroupInterval < 0 || c.Alerts.ResolveTimeout < 0 || c.Alerts.MaxPerMinute < 0 {
		bad("alerts", "group_wait, group_interval, resolve_timeout and max_per_minute must not be negative")
	}
	if c.Alerts.WebhookURL != "" {
		if err := checkURL(c.Alerts.WebhookURL, redact.Endpoint, "http", "https"); err != nil {
			bad("alerts.webhook_url", "%v", err)
		}
	}
}

// checkDatabaseURL checks that s is a Postgres URL (or key=value
// connection string) pgx can read, naming a wrong scheme itself: pgx reads
// any other scheme as a malformed key=value string.
func checkDatabaseURL(s string) error {
	if scheme, _, ok := strings.Cut(s, "://"); ok && !strings.EqualFold(scheme, "postgres") && !strings.EqualFold(scheme, "postgresql") {
		return fmt.Errorf("%q: unknown scheme %q; want postgres://user@host:port/database", redact.URL(s), scheme)
	}
	if _, err := pgconn.ParseConfig(s); err != nil {
		return err
	}
	return nil
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

// ConsoleSecretMinBytes is the shortest LLMQ_CONSOLE_SECRET accepted.
const ConsoleSecretMinBytes = 32

func validTenant(t string) bool { return llmq.ValidID(t) }
