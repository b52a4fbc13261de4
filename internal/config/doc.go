// Package config is the configuration every llmq subcommand shares:
// environment variables, the flags that override them, and an optional YAML
// file (LLMQ_CONFIG) for what does not fit in a variable (per-model quotas,
// prices and fallbacks, retry policy, batch window, API keys, backpressure
// thresholds, alert sinks).
//
// Precedence, highest first: flag, environment variable, YAML file, default.
// Every setting has a documented default (the *Default constants); Load
// applies them and validates, and an invalid setting is reported by name
// (for example `LLMQ_BROKER: open: bad broker URL: scheme "foo" ...` or
// `models.gpt-4o-mini.rpm: must not be negative`).
package config
