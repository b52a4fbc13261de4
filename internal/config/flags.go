package config

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/llmq/llmq/internal/redact"
)

// Flag selects the common flags a command takes, so that its --help lists
// only what it uses (a read-only command has no --broker).
type Flag int

const (
	// FlagDatabase is --database-url.
	FlagDatabase Flag = 1 << iota
	// FlagBroker is --broker.
	FlagBroker
	// FlagUpstream is --openai-base-url and --openai-api-key.
	FlagUpstream
	// FlagAPIKeys is --api-keys.
	FlagAPIKeys
	// FlagsAll is every common flag.
	FlagsAll = FlagDatabase | FlagBroker | FlagUpstream | FlagAPIKeys
)

// psWarning ends the help of the flags that carry a secret.
const psWarning = "; a flag's value shows in ps: prefer the environment or the _FILE variable"

// BindFlags registers --config and the common flags which selects on cmd
// (--database-url, --broker, --openai-base-url, --openai-api-key,
// --api-keys) and returns them. In RunE call Load on the result: a flag
// given overrides its environment variable.
func BindFlags(cmd *cobra.Command, which Flag) *Flags {
	f := &Flags{}
	fs := cmd.Flags()
	fs.StringVar(&f.Config, "config", "", "YAML configuration file (env "+EnvConfig+")")
	// Defaults are shown through redact.URL, like every URL llmq prints.
	if which&FlagDatabase != 0 {
		fs.StringVar(&f.DatabaseURL, "database-url", "", "Postgres URL (env "+EnvDatabaseURL+", default "+redact.URL(DatabaseURLDefault)+")")
	}
	if which&FlagBroker != 0 {
		fs.StringVar(&f.Broker, "broker", "", "broker: "+BrokerForms+" (env "+EnvBroker+", default "+redact.URL(BrokerDefault)+")")
	}
	if which&FlagUpstream != 0 {
		fs.StringVar(&f.OpenAIBaseURL, "openai-base-url", "", "OpenAI-compatible base URL (env "+EnvOpenAIBaseURL+", default "+redact.URL(OpenAIBaseURLDefault)+")")
		fs.StringVar(&f.OpenAIAPIKey, "openai-api-key", "", "upstream API key (env "+EnvOpenAIAPIKey+" or "+EnvOpenAIAPIKey+FileSuffix+psWarning+")")
	}
	if which&FlagAPIKeys != 0 {
		fs.StringVar(&f.APIKeys, "api-keys", "", "HTTP API keys key1:tenantA,key2:tenantB (env "+EnvAPIKeys+" or "+EnvAPIKeys+FileSuffix+psWarning+")")
	}
	return f
}

// Load is Load(os.Getenv, *f).
func (f *Flags) Load() (*Config, error) { return Load(os.Getenv, *f) }
