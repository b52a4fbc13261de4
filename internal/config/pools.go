package config

import (
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/llmq/llmq/internal/redact"
)

// PoolEntry is one upstream of a model's key pool (pools.<model>[i]):
// a base URL and an API key with the model's limits at that key. The key
// comes from exactly one of APIKey (in the file itself), APIKeyFile (a
// file holding it, a mounted Secret) or APIKeyEnv (an environment
// variable naming it, whose _FILE variant works as OPENAI_API_KEY_FILE
// does).
type PoolEntry struct {
	// Name labels the entry in metrics, logs and the job's calls; never
	// the key. Default: its index in the pool.
	Name       string `yaml:"name"`
	BaseURL    string `yaml:"base_url"`
	APIKey     string `yaml:"api_key"`
	APIKeyFile string `yaml:"api_key_file"`
	APIKeyEnv  string `yaml:"api_key_env"`
	// RPM, TPM and Concurrency are the model's limits at the key; 0 =
	// unknown (learnt from the headers).
	RPM         float64 `yaml:"rpm"`
	TPM         float64 `yaml:"tpm"`
	Concurrency int     `yaml:"concurrency"`
	// ContextWindow is the model's context window at the key (an Azure
	// deployment's may be smaller); 0 = the model's.
	ContextWindow int `yaml:"context_window"`
	// InputPricePer1M and OutputPricePer1M are the prices at the key; 0
	// = the model's.
	InputPricePer1M  float64 `yaml:"input_price_per_1m"`
	OutputPricePer1M float64 `yaml:"output_price_per_1m"`

	// Key is the API key, read from whichever source is set (Load).
	Key string `yaml:"-"`
}

// maxPoolEntries bounds a pool (each entry is a metric label and a lane).
const maxPoolEntries = 16

// entryName is what a pool entry's name may be: a short label.
var entryName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,32}$`)

// resolvePoolKeys reads each pool entry's key from its source; the errors
// name the entry's setting, never the key.
func (c *Config) resolvePoolKeys(getenv func(string) string) []error {
	var errs []error
	for _, model := range slices.Sorted(maps.Keys(c.Pools)) {
		for i := range c.Pools[model] {
			e := &c.Pools[model][i]
			at := fmt.Sprintf("pools.%s[%d]", model, i)
			switch {
			case e.APIKeyFile != "":
				data, err := os.ReadFile(e.APIKeyFile)
				if err != nil {
					errs = append(errs, fmt.Errorf("%w: %s.api_key_file: %w", ErrInvalid, at, err))
					continue
				}
				e.Key = strings.TrimSpace(string(data))
			case e.APIKeyEnv != "":
				v, err := secretValue(getenv, "", e.APIKeyEnv)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s.api_key_env: %w", at, err))
					continue
				}
				e.Key = v
			default:
				e.Key = e.APIKey
			}
		}
	}
	return errs
}

// poolDefaults names the unnamed entries by their index (and takes a key
// written in the file when Load did not read the keys).
func (c *Config) poolDefaults() {
	for _, pool := range c.Pools {
		for i := range pool {
			if pool[i].Name == "" {
				pool[i].Name = strconv.Itoa(i)
			}
			if pool[i].Key == "" {
				pool[i].Key = pool[i].APIKey
			}
		}
	}
}

// validatePools checks pools: each model listed in models, each entry
// with a name, a base URL, one key source and a key, and no negative
// number.
func (c *Config) validatePools(bad func(setting, format string, args ...any)) {
	for _, model := range slices.Sorted(maps.Keys(c.Pools)) {
		pool := c.Pools[model]
		p := "pools." + model
		if _, ok := c.Models[model]; !ok {
			bad(p, "the model is not in models: a pool replaces a listed model's upstream")
		}
		if len(pool) == 0 || len(pool) > maxPoolEntries {
			bad(p, "want 1 to %d entries; got %d", maxPoolEntries, len(pool))
		}
		names := map[string]bool{}
		for i, e := range pool {
			at := fmt.Sprintf("%s[%d]", p, i)
			if !entryName.MatchString(e.Name) || names[e.Name] {
				bad(at+".name", "must be 1-32 characters of [A-Za-z0-9._-], unique in the pool; got %q", e.Name)
			}
			names[e.Name] = true
			if err := checkURL(e.BaseURL, redact.URL, "http", "https"); err != nil {
				bad(at+".base_url", "%v", err)
			}
			sources := 0
			for _, s := range []string{e.APIKey, e.APIKeyFile, e.APIKeyEnv} {
				if s != "" {
					sources++
				}
			}
			switch {
			case sources != 1:
				bad(at, "set exactly one of api_key, api_key_file and api_key_env; got %d", sources)
			case e.Key == "" && e.APIKeyEnv != "":
				bad(at+".api_key_env", "%s (or %s%s) is empty or unset", e.APIKeyEnv, e.APIKeyEnv, FileSuffix)
			case e.Key == "":
				bad(at+".api_key_file", "the file is empty")
			}
			for _, f := range []struct {
				name string
				v    float64
			}{{"rpm", e.RPM}, {"tpm", e.TPM}, {"concurrency", float64(e.Concurrency)}, {"context_window", float64(e.ContextWindow)},
				{"input_price_per_1m", e.InputPricePer1M}, {"output_price_per_1m", e.OutputPricePer1M}} {
				if f.v < 0 {
					bad(at+"."+f.name, "must not be negative; got %v", f.v)
				}
			}
		}
	}
}
