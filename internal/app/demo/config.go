package demo

import (
	"cmp"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Defaults of Config.
const (
	// JobsDefault is the number of valid jobs enqueued.
	JobsDefault = 200
	// ModelDefault is the model the jobs ask for.
	ModelDefault = "gpt-4o-mini"
	// FallbackModelDefault is the fallback of ModelDefault.
	FallbackModelDefault = "gpt-4.1-mini"
	// RPMDefault and TPMDefault are the simulated quota of ModelDefault.
	RPMDefault = 600
	TPMDefault = 150_000
	// FallbackRPM and FallbackTPM are the simulated quota of the fallback.
	FallbackRPM = 300
	FallbackTPM = 60_000
	// DatabaseURLDefault is the demo's own database on the local Postgres.
	DatabaseURLDefault = "postgres://postgres@127.0.0.1:5432/llmq_demo?sslmode=disable"
	// ListenDefault is the address of the HTTP API.
	ListenDefault = "127.0.0.1:8080"
	// TopicDefault is the topic (or queue) of the demo's jobs on the
	// embedded broker.
	TopicDefault = "llmq.jobs"
	// APIKeyDefault is the API key of the demo tenant.
	APIKeyDefault = "sk-llmq-demo"
	// OperatorKeyDefault is the demo's operator key: it signs in to the
	// web console (/ui) with every tenant and the batches in view.
	OperatorKeyDefault = "sk-llmq-demo-operator"
	// TenantDefault is the tenant of the demo jobs.
	TenantDefault = "demo"
	// TimeoutDefault bounds a run.
	TimeoutDefault = 5 * time.Minute
	// LongEvery makes every fourth job a long document.
	LongEvery = 4
	// LongPromptWords and LongMaxTokens size a long job: about 1,500
	// tokens charged against TPM, ten times a short one.
	LongPromptWords = 1000
	LongMaxTokens   = 500
	// DeferrableEvery makes every tenth job deferrable (Batch API lane).
	DeferrableEvery = 10
	// MalformedPer is one malformed message per this many jobs (at least
	// MalformedMin).
	MalformedPer = 60
	// MalformedMin is the fewest malformed messages of a run.
	MalformedMin = 3
	// FaultRate is the share of upstream calls answered with a 500 or a
	// 503 (half each); the worker retries them.
	FaultRate = 0.02
)

// Config configures a demo run.
type Config struct {
	// Jobs is the number of valid jobs. 0 = JobsDefault.
	Jobs int
	// Malformed is the number of malformed messages. 0 = one per
	// MalformedPer jobs, at least MalformedMin; -1 = none.
	Malformed int
	// RPM and TPM are the simulated quota of the demo model. 0 =
	// RPMDefault, TPMDefault.
	RPM, TPM int
	// DatabaseURL is the Postgres database, created and migrated when
	// missing. "" = DatabaseURLDefault.
	DatabaseURL string
	// Broker is a broker URL (kafka://, amqp://, memory://); "" or
	// "embedded" = an in-process Kafka cluster.
	Broker string
	// Listen is the address of the HTTP API. "" = ListenDefault (any free
	// port when that one is taken); port 0 picks a free port.
	Listen string
	// Out receives the progress and the summary. nil = io.Discard.
	Out io.Writer
	// TTY redraws one progress line in place; false prints plain lines.
	TTY bool
	// ProgressEvery is the time between progress updates. 0 = 1s on a
	// TTY, 5s otherwise.
	ProgressEvery time.Duration
	// KeepRunning keeps the API and the worker up after the summary until
	// the context is done.
	KeepRunning bool
	// Timeout bounds the wait for the jobs. 0 = TimeoutDefault.
	Timeout time.Duration
	// Logger receives the components' logs. nil = discarded (the demo
	// prints its own progress).
	Logger *slog.Logger
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.Jobs = cmp.Or(c.Jobs, JobsDefault)
	if c.Malformed == 0 {
		c.Malformed = max(MalformedMin, c.Jobs/MalformedPer)
	}
	if c.Malformed < 0 {
		c.Malformed = 0
	}
	c.RPM = cmp.Or(c.RPM, RPMDefault)
	c.TPM = cmp.Or(c.TPM, TPMDefault)
	c.DatabaseURL = cmp.Or(c.DatabaseURL, DatabaseURLDefault)
	c.Listen = cmp.Or(c.Listen, ListenDefault)
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = 5 * time.Second
		if c.TTY {
			c.ProgressEvery = time.Second
		}
	}
	c.Timeout = cmp.Or(c.Timeout, TimeoutDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Jobs < 1:
		return fmt.Errorf("%w: Jobs must be positive, got %d", ErrInvalidConfig, c.Jobs)
	case c.RPM < 1 || c.TPM < 1:
		return fmt.Errorf("%w: RPM and TPM must be positive, got %d and %d", ErrInvalidConfig, c.RPM, c.TPM)
	case c.ProgressEvery < 0:
		return fmt.Errorf("%w: ProgressEvery must not be negative", ErrInvalidConfig)
	case c.Timeout < 0:
		return fmt.Errorf("%w: Timeout must not be negative", ErrInvalidConfig)
	}
	return nil
}
