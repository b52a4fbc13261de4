// Package config is the configuration every llmq subcommand shares:
// environment variables, the flags that override them, and an optional YAML
// file (LLMQ_CONFIG) for what does not fit in a variable (per-model quotas,
// prices and fallbacks, retry policy, batch window, API keys, backpressure
// thresholds, alert sinks, operator keys).
//
// Precedence, highest first: flag, environment variable, YAML file, default.
// The package only parses and validates: the defaults of where the services
// are (database, broker, upstream) are its own constants, and every other
// setting left zero means the default of the component that reads it
// (worker, batchapi, producer, dlq), which exports it. Load validates what
// it can check alone; app.Check checks what needs a component (the batch
// window's grammar, bounds against a component's default). An invalid
// setting is reported by name (for example `LLMQ_BROKER: open: bad broker
// URL: scheme "foo" ...` or `models.gpt-4o-mini.rpm: must not be negative`).
package config
