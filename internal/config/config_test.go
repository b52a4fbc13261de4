package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/transport/open"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func writeYAML(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "llmq.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	c, err := config.Load(env(nil), config.Flags{})
	require.NoError(t, err)
	require.Equal(t, config.DatabaseURLDefault, c.DatabaseURL)
	require.Equal(t, config.OpenAIBaseURLDefault, c.OpenAIBaseURL)
	require.Equal(t, config.OpenAIAPIKeyDefault, c.OpenAIAPIKey)
	require.Equal(t, config.BrokerAMQP, c.Broker.Kind)
	require.Equal(t, "llmq.jobs", c.Broker.Dest)
	require.Equal(t, "amqp://guest:guest@127.0.0.1:5672/", c.Broker.AMQPURL)
	require.Equal(t, "amqp://guest:xxxxx@127.0.0.1:5672/?queue=llmq.jobs", c.Broker.String())
	// The components' settings stay zero: each component applies its own
	// default.
	require.Zero(t, c.MaxMessageBytes)
	require.Zero(t, c.Retry)
	require.Zero(t, c.Batch)
	require.Zero(t, c.Backpressure)
	require.Empty(t, c.APIKeys)
	require.Empty(t, c.Models)
	require.Equal(t, "", c.Strategy)
}

func TestPrecedence(t *testing.T) {
	t.Parallel()
	p := writeYAML(t, `
strategy: adaptive
max_message_bytes: 2048
api_keys:
  k1: yaml-tenant
  k2: other
models:
  gpt-4o-mini:
    rpm: 500
    tpm: 200000
    concurrency: 20
    context_window: 128000
    max_output_default: 512
    input_price_per_1m: 0.15
    output_price_per_1m: 0.6
    fallbacks: [gpt-4o-nano]
  gpt-4o-nano: {}
retry:
  max_attempts: 3
  base_delay: 1s
  max_delay: 10s
  max_retry_after: 1m
  outage_limit: 30m
ingest:
  window: 500
upstream:
  max_response_bytes: 65536
backpressure:
  soft_depth: 100
  hard_depth: 1000
alerts:
  webhook_url: http://127.0.0.1:9999/hook
tenants:
  acme:
    weight: 3
    priority: normal
    rpm: 60
    tpm: 90000
    concurrency: 4
    daily_cost: 50
    monthly_cost: 1000
    overage: reject
    allow_unknown_projects: true
    projects:
      support: {tpm: 30000, priority: low, daily_cost: 5, overage: degrade, output_cap: 128}
  small: {}
`)
	e := env(map[string]string{
		config.EnvConfig:       p,
		config.EnvDatabaseURL:  "postgres://env@db:5432/envdb",
		config.EnvBroker:       "kafka://k1:9092,k2:9093/jobs?group=g1",
		config.EnvAPIKeys:      "k1:env-tenant, k3:third",
		config.EnvOpenAIAPIKey: "sk-env",
	})
	c, err := config.Load(e, config.Flags{DatabaseURL: "postgres://flag@db:5432/flagdb", Broker: "embedded"})
	require.NoError(t, err)
	require.Equal(t, "postgres://flag@db:5432/flagdb", c.DatabaseURL, "the flag beats the environment")
	require.Equal(t, config.BrokerEmbedded, c.Broker.Kind)
	require.Equal(t, "sk-env", c.OpenAIAPIKey)
	require.Equal(t, map[string]string{"k1": "env-tenant", "k2": "other", "k3": "third"}, c.APIKeys)
	require.Equal(t, "adaptive", c.Strategy)
	require.Equal(t, 2048, c.MaxMessageBytes)
	m := c.Models["gpt-4o-mini"]
	require.Equal(t, llmq.Model{RPM: 500, TPM: 200000, Concurrency: 20, ContextWindow: 128000, MaxOutputDefault: 512,
		InputPricePer1M: 0.15, OutputPricePer1M: 0.6, Fallbacks: []string{"gpt-4o-nano"}}, m)
	require.Equal(t, config.Retry{MaxAttempts: 3, BaseDelay: time.Second, MaxDelay: 10 * time.Second, MaxRetryAfter: time.Minute,
		OutageLimit: 30 * time.Minute},
		c.Retry, "the settings not given stay zero")
	require.Equal(t, config.Ingest{Window: 500}, c.Ingest)
	require.Equal(t, config.Upstream{MaxResponseBytes: 65536}, c.Upstream)
	require.Equal(t, config.Backpressure{SoftDepth: 100, HardDepth: 1000}, c.Backpressure)
	require.Equal(t, "http://127.0.0.1:9999/hook", c.Alerts.WebhookURL)
	require.Equal(t, llmq.Tenants{
		"acme": {Scope: llmq.Scope{Weight: 3, Priority: llmq.PriorityNormal, RPM: 60, TPM: 90000, Concurrency: 4,
			DailyCost: 50, MonthlyCost: 1000, Overage: llmq.OverageReject},
			Projects: map[string]llmq.Scope{"support": {TPM: 30000, Priority: llmq.PriorityLow, DailyCost: 5,
				Overage: llmq.OverageDegrade, OutputCap: 128}}, AllowUnknownProjects: true},
		"small": {},
	}, c.Tenants)
	require.Equal(t, 3.0, c.Tenants.Weight("acme"))
	require.Equal(t, 1.0, c.Tenants.Weight("small"), "the default weight")
	require.Equal(t, 1.0, c.Tenants.Weight("unlisted"), "the default weight")

	c, err = config.Load(e, config.Flags{})
	require.NoError(t, err)
	require.Equal(t, "postgres://env@db:5432/envdb", c.DatabaseURL)
	require.Equal(t, config.BrokerKafka, c.Broker.Kind)
	require.Equal(t, []string{"k1:9092", "k2:9093"}, c.Broker.Brokers)
	require.Equal(t, "jobs", c.Broker.Destination())
	require.Equal(t, "g1", c.Broker.Group)
}

func TestParseBroker(t *testing.T) {
	t.Parallel()
	b, err := config.ParseBroker("kafka://127.0.0.1:9092")
	require.NoError(t, err)
	require.Equal(t, config.DestinationDefault, b.Destination())
	require.Equal(t, "", b.Group, "the Kafka adapter's default group")
	b, err = config.ParseBroker("amqp://u:p@rabbit/vh?queue=q1&prefetch=50")
	require.NoError(t, err)
	require.Equal(t, config.BrokerAMQP, b.Kind)
	require.Equal(t, "q1", b.Destination())
	require.Equal(t, 50, b.Prefetch)
	require.Equal(t, "amqp://u:p@rabbit/vh?queue=q1&prefetch=50", b.Raw)
	require.Equal(t, "amqp://u:p@rabbit/vh", b.AMQPURL)

	for _, bad := range []string{"foo://x", "nothing", "kafka://:9092/t", "kafka://h:0/t", "kafka://h:1,h/t", "kafka://h:1/a/b", "amqp://h:99999/"} {
		_, err := config.ParseBroker(bad)
		require.Error(t, err, bad)
	}
}

// TestInvalidNamesTheSetting checks that each bad setting stops Load with an
// error naming it.
func TestInvalidNamesTheSetting(t *testing.T) {
	t.Parallel()
	cases := []struct {
		env  map[string]string
		yaml string
		want string
	}{
		{env: map[string]string{config.EnvBroker: "foo://x"}, want: `LLMQ_BROKER: "foo://x": unknown scheme "foo"; want kafka://`},
		{env: map[string]string{config.EnvDatabaseURL: "postgres://h:notaport/db"}, want: "LLMQ_DATABASE_URL: "},
		{env: map[string]string{config.EnvOpenAIBaseURL: "ftp://x"}, want: "OPENAI_BASE_URL: "},
		{env: map[string]string{config.EnvAPIKeys: "k1:ok,k2"}, want: "LLMQ_API_KEYS: entry 2"},
		{env: map[string]string{config.EnvAPIKeys: "k1:bad tenant"}, want: "LLMQ_API_KEYS: entry 1"},
		{yaml: "strategy: fastest", want: `strategy: shaping: unknown strategy "fastest"`},
		{yaml: "models:\n  m: {rpm: -1}", want: "models.m.rpm: must not be negative"},
		{yaml: "models:\n  m: {batch_discount: 2}", want: "models.m.batch_discount"},
		{yaml: "models:\n  m: {fallbacks: [m]}", want: "models.m.fallbacks[0]"},
		{yaml: "models:\n  m: {output_price_per_1m: -1}", want: "models.m.output_price_per_1m"},
		{yaml: "retry: {max_attempts: -1}", want: "retry.max_attempts: must not be negative"},
		{yaml: "retry: {fallback_max_wait: -1s}", want: "retry.fallback_max_wait: must not be negative"},
		{yaml: "retry: {max_retry_after: -1s}", want: "retry.max_retry_after: must not be negative"},
		{yaml: "ingest: {window: -2}", want: "ingest.window: must not be negative"},
		{yaml: "ingest: {size_order: -0.5}", want: "ingest.size_order: must be between 0 and 1000"},
		{yaml: "ingest: {size_order: .nan}", want: "ingest.size_order: must be between 0 and 1000"},
		{yaml: "upstream: {max_response_bytes: -2}", want: "upstream.max_response_bytes: must not be negative"},
		{yaml: "retry: {base_delay: soon}", want: "LLMQ_CONFIG"},
		{yaml: "batch: {max_lines: -1}", want: "batch.max_lines: must not be negative"},
		{yaml: "gateway: {max_deadline: -1s}", want: "gateway.max_deadline: must not be negative"},
		{yaml: "gateway: {timeout: 20m, max_deadline: 15m}", want: "gateway.timeout: 20m0s: must not pass gateway.max_deadline (15m0s)"},
		{yaml: "gateway: {max_waiting: -2}", want: "gateway.max_waiting: must not be negative"},
		{yaml: "rate_limits: {key_rpm: -2}", want: "rate_limits.key_rpm: must not be negative"},
		{yaml: "rate_limits: {tenant_rpm: -2}", want: "rate_limits.tenant_rpm: must not be negative"},
		{yaml: "rate_limits: {auth_failures_per_minute: -2}", want: "rate_limits.auth_failures_per_minute: must not be negative"},
		{yaml: "rate_limits: {max_clients: -1}", want: "rate_limits.max_clients: must not be negative"},
		{yaml: "backpressure: {hard_depth: -5}", want: "backpressure.hard_depth: must not be negative"},
		{yaml: "alerts: {alertmanager_url: \"not a url\"}", want: "alerts.alertmanager_url"},
		{yaml: "api_keys: {k: \"a b\"}", want: "api_keys"},
		{yaml: "max_message_bytes: -2", want: "max_message_bytes"},
		{yaml: "modles: {}", want: `line 1: unknown key "modles"; want one of alerts, allow_any_model,`},
		{yaml: "alerts: {webhook_url: \"ftp://hooks.example/services/T0/SECRET\"}", want: `alerts.webhook_url: "ftp://hooks.example/…": scheme`},
		{yaml: "tenants:\n  acme: {weight: -1}", want: "tenants.acme.weight: must be a finite number, not negative"},
		{yaml: "tenants:\n  acme: {weight: .nan}", want: "tenants.acme.weight: must be a finite number"},
		{yaml: "tenants:\n  acme: {priority: urgent}", want: `tenants.acme.priority: "urgent": want high, normal or low`},
		{yaml: "tenants:\n  \"a b\": {}", want: "tenants.a b: a tenant is 1-128 characters"},
		{yaml: "tenants:\n  acme: {projects: {p1: {tpm: -5}}}", want: "tenants.acme.projects.p1.tpm: must be a finite number"},
		{yaml: "tenants:\n  acme: {projects: {\"x/y\": {}}}", want: "tenants.acme.projects.x/y: a project is"},
		{yaml: "tenants:\n  acme: {rmp: 5}", want: `line 2: tenants.acme: unknown key "rmp"; want one of allow_unknown_projects, concurrency, daily_cost,`},
		{yaml: "tenants:\n  acme: {daily_cost: -1}", want: "tenants.acme.daily_cost: must be a finite number, not negative"},
		{yaml: "tenants:\n  acme: {monthly_cost: .inf}", want: "tenants.acme.monthly_cost: must be a finite number"},
		{yaml: "tenants:\n  acme: {projects: {p1: {output_cap: -2}}}", want: "tenants.acme.projects.p1.output_cap: must be a finite number"},
		{yaml: "tenants:\n  acme: {overage: spend}", want: `tenants.acme.overage: "spend": want queue, reject or degrade`},
		{yaml: "retry: {fallback_on: [rate_limit, oops]}", want: `retry.fallback_on[1]: "oops": want rate_limit, server_error, timeout`},
	}
	for _, tc := range cases {
		e := map[string]string{}
		for k, v := range tc.env {
			e[k] = v
		}
		if tc.yaml != "" {
			e[config.EnvConfig] = writeYAML(t, tc.yaml)
		}
		_, err := config.Load(env(e), config.Flags{})
		require.Error(t, err, tc.want)
		require.ErrorIs(t, err, config.ErrInvalid, tc.want)
		require.Contains(t, err.Error(), tc.want)
	}

	_, err := config.Load(env(map[string]string{config.EnvConfig: "/nonexistent/llmq.yaml"}), config.Flags{})
	require.ErrorContains(t, err, "LLMQ_CONFIG: ")

	// Several bad settings are all reported.
	_, err = config.Load(env(map[string]string{config.EnvBroker: "foo://x", config.EnvOpenAIBaseURL: "x"}), config.Flags{})
	require.ErrorContains(t, err, "LLMQ_BROKER")
	require.ErrorContains(t, err, "OPENAI_BASE_URL")
	require.Equal(t, 2, strings.Count(err.Error(), "invalid configuration"))

	// API keys are not echoed in errors.
	_, err = config.Load(env(map[string]string{config.EnvAPIKeys: "supersecretkey:bad tenant"}), config.Flags{})
	require.ErrorContains(t, err, "supe…")
	require.NotContains(t, err.Error(), "supersecretkey")
}

func TestBindFlags(t *testing.T) {
	t.Setenv(config.EnvDatabaseURL, "postgres://env@h:5432/envdb")
	t.Setenv(config.EnvBroker, "embedded")
	cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
	f := config.BindFlags(cmd, config.FlagsAll)
	cmd.SetArgs([]string{"--database-url", "postgres://flag@h:5432/flagdb"})
	require.NoError(t, cmd.Execute())
	c, err := f.Load()
	require.NoError(t, err)
	require.Equal(t, "postgres://flag@h:5432/flagdb", c.DatabaseURL)
	require.Equal(t, config.BrokerEmbedded, c.Broker.Kind)
}

// TestBrokerErrors: whatever is wrong with a broker URL, the error lists
// the same forms and never shows the password.
func TestBrokerErrors(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{
		"guest:S3cret@127.0.0.1:5672", "foo://guest:S3cret@h/x", "http://guest:S3cret@h:5672/",
		"amqp://guest:S3cret%zz@h:5672/", "amqp://guest:S3cret@h:99999/", "kafka://u:S3cret@:9092/t",
		"kafka://u:S3cret@h:1/a/b", "amqp://guest:S3cret@h/?prefetch=-1", "memory",
	} {
		_, err := config.ParseBroker(bad)
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), config.BrokerForms, bad)
		require.NotContains(t, err.Error(), "S3cret", bad)
	}
	require.Contains(t, config.BrokerForms, "embedded")
}

// TestBrokerSchemesAreTheTransports: LLMQ_BROKER takes every scheme the
// transport opens, and its forms name each one.
func TestBrokerSchemesAreTheTransports(t *testing.T) {
	t.Parallel()
	for _, scheme := range open.Schemes() {
		require.Contains(t, config.BrokerForms, scheme+"://", scheme)
		b, err := config.ParseBroker(scheme + "://h:1/q")
		require.NoError(t, err, scheme)
		require.NotEmpty(t, b.Kind, scheme)
	}
}

// TestSecretFiles: a key may come from a file named by NAME_FILE (a mounted
// Secret) instead of a flag (ps shows flags) or the variable itself.
func TestSecretFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	e := map[string]string{
		config.EnvOpenAIAPIKey + config.FileSuffix: write("openai", "sk-from-file\n"),
		config.EnvAPIKeys + config.FileSuffix:      write("keys", " k1:acme,k2:globex \n"),
		config.EnvDatabaseURL + config.FileSuffix:  write("db", "postgres://app:pw@db:5432/llmq\n"),
		config.EnvBroker + config.FileSuffix:       write("broker", "amqp://u:pw@mq:5672/?queue=q\n"),
	}
	c, err := config.Load(env(e), config.Flags{})
	require.NoError(t, err)
	require.Equal(t, "sk-from-file", c.OpenAIAPIKey)
	require.Equal(t, map[string]string{"k1": "acme", "k2": "globex"}, c.APIKeys)
	require.Equal(t, "postgres://app:pw@db:5432/llmq", c.DatabaseURL)
	require.Equal(t, "q", c.Broker.Destination())

	// A flag still wins; the variable and its file together are refused.
	c, err = config.Load(env(e), config.Flags{OpenAIAPIKey: "sk-flag"})
	require.NoError(t, err)
	require.Equal(t, "sk-flag", c.OpenAIAPIKey)
	e[config.EnvOpenAIAPIKey] = "sk-env"
	_, err = config.Load(env(e), config.Flags{})
	require.ErrorIs(t, err, config.ErrInvalid)
	require.ErrorContains(t, err, "OPENAI_API_KEY and OPENAI_API_KEY_FILE are both set")
	require.NotContains(t, err.Error(), "sk-env")

	// A missing file is named, and nothing of a secret is shown.
	_, err = config.Load(env(map[string]string{config.EnvAPIKeys + config.FileSuffix: filepath.Join(dir, "none")}), config.Flags{})
	require.ErrorContains(t, err, "LLMQ_API_KEYS_FILE")
}

// TestReadOnlyFlags: a command binds only the flags it uses.
func TestReadOnlyFlags(t *testing.T) {
	t.Parallel()
	cmd := &cobra.Command{Use: "x"}
	config.BindFlags(cmd, config.FlagDatabase)
	require.NotNil(t, cmd.Flags().Lookup("database-url"))
	require.NotNil(t, cmd.Flags().Lookup("config"))
	for _, name := range []string{"broker", "openai-base-url", "openai-api-key", "api-keys"} {
		require.Nil(t, cmd.Flags().Lookup(name), name)
	}
	cmd = &cobra.Command{Use: "y"}
	config.BindFlags(cmd, config.FlagsAll)
	require.Contains(t, cmd.Flags().Lookup("broker").Usage, "memory://")
	for _, name := range []string{"openai-api-key", "api-keys"} {
		require.Contains(t, cmd.Flags().Lookup(name).Usage, "shows in ps", name)
	}
}

func TestModelsAllowlist(t *testing.T) {
	t.Parallel()
	c, err := config.Load(env(map[string]string{config.EnvConfig: writeYAML(t, `
models:
  gpt-4o-mini: {fallbacks: [gpt-4.1-mini]}
  gpt-4.1-mini: {}
retry: {fallback_on: [rate_limit, server_error, timeout]}
`)}), config.Flags{})
	require.NoError(t, err)
	require.Equal(t, []string{"rate_limit", "server_error", "timeout"}, c.Retry.FallbackOn)
	require.False(t, c.AllowAnyModel)
	require.True(t, c.Catalog().Allows("gpt-4.1-mini"))
	require.False(t, c.Catalog().Allows("o3-pro"))
	c, err = config.Load(env(map[string]string{config.EnvConfig: writeYAML(t, "models: {a: {}}\nallow_any_model: true\n")}), config.Flags{})
	require.NoError(t, err)
	require.True(t, c.Catalog().Allows("o3-pro"))
	c, err = config.Load(env(nil), config.Flags{})
	require.NoError(t, err)
	require.True(t, c.Catalog().Allows("o3-pro"), "no models named: any name")
}

// TestOperatorKeysAndConsoleSecret: operator keys come from the YAML and
// LLMQ_OPERATOR_KEYS (or its file), added together; a key cannot be both a
// tenant's and an operator's; the console secret is environment-only and
// long enough.
func TestOperatorKeysAndConsoleSecret(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "ops")
	require.NoError(t, os.WriteFile(file, []byte(" op-file-1, op-file-2 \n"), 0o600))
	secret := strings.Repeat("s", config.ConsoleSecretMinBytes)
	c, err := config.Load(env(map[string]string{
		config.EnvConfig:        writeYAML(t, "operator_keys: [op-yaml, {name: alice, key: op-alice}, bob=op-bob]\napi_keys: {k1: acme}\n"),
		config.EnvOperatorKeys:  "op-env-1, ,carol=op-env-2,b64key==",
		config.EnvConsoleSecret: secret,
	}), config.Flags{})
	require.NoError(t, err)
	require.Equal(t, []config.OperatorKey{{Key: "op-yaml"}, {Name: "alice", Key: "op-alice"}, {Name: "bob", Key: "op-bob"},
		{Key: "op-env-1"}, {Name: "carol", Key: "op-env-2"}, {Key: "b64key=="}}, c.OperatorKeys, "named or not; a padded key stays a key")
	require.Equal(t, secret, c.ConsoleSecret)
	c, err = config.Load(env(map[string]string{config.EnvOperatorKeys + config.FileSuffix: file}), config.Flags{})
	require.NoError(t, err)
	require.Equal(t, []config.OperatorKey{{Key: "op-file-1"}, {Key: "op-file-2"}}, c.OperatorKeys)
	c, err = config.Load(env(nil), config.Flags{})
	require.NoError(t, err)
	require.Empty(t, c.OperatorKeys)
	require.Empty(t, c.ConsoleSecret, "none configured: the console makes one per process")

	for _, tc := range []struct {
		env  map[string]string
		yaml string
		want string
	}{
		{env: map[string]string{config.EnvOperatorKeys: "shared-key-123", config.EnvAPIKeys: "shared-key-123:acme"},
			want: "operator_keys[0]: key \"shar"},
		{yaml: "operator_keys: [\" \"]", want: "operator_keys[0]: must not be empty"},
		{yaml: "operator_keys: [a=k1, a=k2]", want: `operator_keys[1].name: "a" names operator_keys[0] too`},
		{yaml: "operator_keys: [{name: \"has space\", key: k1}]", want: "operator_keys[0].name: must be 1-128 characters"},
		{yaml: "operator_keys: [{name: a, key: \"\"}]", want: "operator_keys[0]: must not be empty"},
		{yaml: "operator_keys: [{name: a, kye: k1}]", want: `operator_keys[0]: unknown key "kye"`},
		{yaml: "operator_keys: [k1, x=k1]", want: "operator_keys[1]: key"},
		{env: map[string]string{config.EnvConsoleSecret: "short-secret"}, want: "LLMQ_CONSOLE_SECRET: must be at least 32 bytes"},
	} {
		e := tc.env
		if e == nil {
			e = map[string]string{}
		}
		if tc.yaml != "" {
			e[config.EnvConfig] = writeYAML(t, tc.yaml)
		}
		_, err := config.Load(env(e), config.Flags{})
		require.ErrorIs(t, err, config.ErrInvalid)
		require.ErrorContains(t, err, tc.want)
		require.NotContains(t, err.Error(), "shared-key-123", "no key in an error")
		require.NotContains(t, err.Error(), "short-secret")
	}
}

// TestNewcomerMistakes checks the errors of a newcomer's usual mistakes:
// each names the setting (the _FILE variable when the value came from a
// file), shows the part to fix and the YAML line, and names no Go type.
func TestNewcomerMistakes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	urlFile := filepath.Join(dir, "database-url")
	require.NoError(t, os.WriteFile(urlFile, []byte("postgress://u:secret@h/db\n"), 0o600))
	keysFile := filepath.Join(dir, "api-keys")
	require.NoError(t, os.WriteFile(keysFile, []byte("secret-key-1:acme,secret-key-2\n"), 0o600))
	brokerFile := filepath.Join(dir, "broker")
	require.NoError(t, os.WriteFile(brokerFile, []byte("foo://u:secret@h/q\n"), 0o600))
	cases := []struct {
		env  map[string]string
		yaml string
		want string
	}{
		{env: map[string]string{config.EnvDatabaseURL: "postgress://postgres@127.0.0.1/x"},
			want: `invalid configuration: LLMQ_DATABASE_URL: "postgress://postgres@127.0.0.1/x": unknown scheme "postgress"; want postgres://user@host:port/database`},
		{env: map[string]string{config.EnvDatabaseURL + config.FileSuffix: urlFile},
			want: `invalid configuration: LLMQ_DATABASE_URL_FILE (` + urlFile + `): "postgress://u:xxxxx@h/db": unknown scheme "postgress"; want postgres://user@host:port/database`},
		{env: map[string]string{config.EnvBroker + config.FileSuffix: brokerFile},
			want: `invalid configuration: LLMQ_BROKER_FILE (` + brokerFile + `): "foo://u:xxxxx@h/q": unknown scheme "foo"`},
		{env: map[string]string{config.EnvAPIKeys + config.FileSuffix: keysFile},
			want: `invalid configuration: LLMQ_API_KEYS_FILE (` + keysFile + `): entry 2 ("secr…:") is not key:tenant`},
		{yaml: "models:\n  gpt-4o-mini: {rpm: 1\n", want: "line 2: did not find expected ',' or '}'"},
		{yaml: "strategy: shape\nmodels: [a\n", want: "line 2: did not find expected ',' or ']'"},
		{yaml: "models: {a: 1\n", want: "line 2: did not find expected ',' or '}'"},
		{yaml: "strategy: shape\n\tmodels: 1\n", want: "line 2: found a tab character that violates indentation"},
		{yaml: "models:\n  gpt-4o-mini:\n    rpn: 5\n", want: `line 3: models.gpt-4o-mini: unknown key "rpn"; want one of batch_discount, concurrency, context_window, fallbacks, input_price_per_1m, max_output_default, output_price_per_1m, rpm, tpm`},
		{yaml: "modles: {}\n", want: `line 1: unknown key "modles"; want one of `},
		{yaml: "models:\n  gpt-4o-mini: {rpm: fast}\n", want: `line 2: models.gpt-4o-mini.rpm: "fast" is not a number`},
		{yaml: "retry:\n  base_delay: 5\n", want: `line 2: retry.base_delay: "5" is not a duration: give its unit, for example 500ms`},
		{yaml: "models:\n  gpt-4o-mini: {fallbacks: [gpt-4.1-mni]}\n  gpt-4.1-mini: {}\n",
			want: `models.gpt-4o-mini.fallbacks[0]: "gpt-4.1-mni" is not in models (gpt-4.1-mini, gpt-4o-mini): list it there with its quota, or set allow_any_model: true`},
	}
	for _, tc := range cases {
		e := map[string]string{}
		for k, v := range tc.env {
			e[k] = v
		}
		if tc.yaml != "" {
			e[config.EnvConfig] = writeYAML(t, tc.yaml)
		}
		_, err := config.Load(env(e), config.Flags{})
		require.ErrorIs(t, err, config.ErrInvalid, tc.want)
		require.Contains(t, err.Error(), tc.want)
		require.NotContains(t, err.Error(), "secret")
		require.NotContains(t, err.Error(), "llmq.Model")
		require.NotContains(t, err.Error(), "float64")
	}

	// A fallback listed in models, or any with allow_any_model, is fine.
	for _, y := range []string{"models:\n  a: {fallbacks: [b]}\n  b: {}\n", "allow_any_model: yes\nmodels:\n  a: {fallbacks: [b]}\n",
		"retry: {base_delay: 0s}\ngateway: {timeout: 1m}\n"} {
		_, err := config.Load(env(map[string]string{config.EnvConfig: writeYAML(t, y)}), config.Flags{})
		require.NoError(t, err, y)
	}
}
