package config

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/llmq/llmq/internal/redact"
)

// BindFlags registers the common flags on cmd (--database-url, --broker,
// --config, --openai-base-url, --openai-api-key, --api-keys) and returns
// them. In RunE call Load on the result: a flag given overrides its
// environment variable.
func BindFlags(cmd *cobra.Command) *Flags {
	f := &Flags{}
	fs := cmd.Flags()
	// Defaults are shown through redact.URL, like every URL llmq prints.
	fs.StringVar(&f.DatabaseURL, "database-url", "", "Postgres URL (env "+EnvDatabaseURL+", default "+redact.URL(DatabaseURLDefault)+")")
	fs.StringVar(&f.Broker, "broker", "", "broker: kafka://host:port[,host:port]/topic, amqp://user:pass@host:port/vhost?queue=name or embedded (env "+EnvBroker+", default "+redact.URL(BrokerDefault)+")")
	fs.StringVar(&f.Config, "config", "", "YAML configuration file (env "+EnvConfig+")")
	fs.StringVar(&f.OpenAIBaseURL, "openai-base-url", "", "OpenAI-compatible base URL (env "+EnvOpenAIBaseURL+", default "+redact.URL(OpenAIBaseURLDefault)+")")
	fs.StringVar(&f.OpenAIAPIKey, "openai-api-key", "", "upstream API key (env "+EnvOpenAIAPIKey+")")
	fs.StringVar(&f.APIKeys, "api-keys", "", "HTTP API keys key1:tenantA,key2:tenantB (env "+EnvAPIKeys+")")
	return f
}

// Load is Load(os.Getenv, *f).
func (f *Flags) Load() (*Config, error) { return Load(os.Getenv, *f) }
