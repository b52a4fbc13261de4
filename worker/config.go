package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
)

// Defaults of Config.
const (
	MaxInFlightDefault     = 256
	MaxAttemptsDefault     = 6
	FallbackAfterDefault   = 3
	FallbackMaxWaitDefault = 2 * time.Second
	LeaseDefault           = 2 * time.Minute
	ShutdownTimeoutDefault = 30 * time.Second
	leasedRecheckMax       = 30 * time.Second
	// storeRetryDelay holds a message whose claim failed on a database
	// error before it is handed back.
	storeRetryDelay = time.Second
)

// JobStore is what the worker needs of the job store: the claim and the
// state changes of one job. [*store.Store] implements it; its methods
// document the transitions and errors (store.ErrTerminal, store.ErrLeased,
// store.ErrBatched) the worker relies on.
type JobStore interface {
	// Claim takes the job for owner for lease (queued, retrying or an
	// expired or own lease → running), recording it first when absent.
	Claim(ctx context.Context, j *llmq.Job, owner string, lease time.Duration) (*store.JobRecord, error)
	// ExtendLease pushes owner's lease to now+lease.
	ExtendLease(ctx context.Context, id, owner string, lease time.Duration) error
	// Release hands owner's job back to queued.
	Release(ctx context.Context, id, owner string) error
	// MarkRetrying records a retryable failure (running → retrying).
	MarkRetrying(ctx context.Context, id, owner, code, msg string) error
	// StoreResult records the answer (→ succeeded), once.
	StoreResult(ctx context.Context, id string, r store.Result) (stored bool, err error)
	// MarkFailed records a permanent failure (→ failed).
	MarkFailed(ctx context.Context, id, code, msg string) error
	// MarkExpired records a job whose deadline passed before it started.
	MarkExpired(ctx context.Context, id string) error
}

// DeadLetterer takes the jobs that must not be retried any more: it records
// the letter, publishes it to the dead-letter queue, marks the job
// dead_lettered and raises an alert. [dlq.Writer] implements it.
type DeadLetterer interface {
	DeadLetter(ctx context.Context, l dlq.Letter) error
}

// Router diverts a claimed job away from the live lane (the Batch API lane
// of package batchapi). Route returns true when it took the job: the job is
// then in a stored state (batched) and its message may be acked.
type Router interface {
	Route(ctx context.Context, rec *store.JobRecord) (bool, error)
}

// Config configures a Worker. Fields marked required have no default.
type Config struct {
	// Subscriber delivers the job messages. Required.
	Subscriber transport.Subscriber
	// Store holds the jobs' state (a *store.Store). Required.
	Store JobStore
	// Upstream makes the chat completion calls (OpenAIUpstream over
	// NewOpenAIClient). Required.
	Upstream Upstream
	// DeadLetters takes exhausted and poison jobs. Required.
	DeadLetters DeadLetterer
	// Router, when set, may divert deferrable jobs to the batch lane.
	Router Router

	// Strategy is the shaping strategy of every lane. "" = shape when a
	// model's quota is known, adaptive when not.
	Strategy shaping.Strategy
	// Catalog holds each model's quota (which shapes its lane), context
	// window (checked before a fallback), prices (the cost stored with each
	// result) and fallbacks; a model it does not list uses Catalog.Default.
	Catalog llmq.Catalog
	// Estimator counts prompt tokens. nil = a new shaping.Estimator.
	Estimator *shaping.Estimator

	// MaxInFlight bounds the messages held at once (waiting, calling or
	// backing off). Default 256. The subscriber's prefetch should match.
	MaxInFlight int
	// MaxAttempts bounds the upstream calls of one job, fallbacks included.
	// Default 6.
	MaxAttempts int
	// FallbackAfter is how many rate-limited calls a model gets before the
	// job moves to the next fallback model. Default 3.
	FallbackAfter int
	// FallbackMaxWait is the longest wait on a rate-limited model (its
	// Retry-After, or its lane's pause after 429s) before a job with a
	// fallback moves on at once rather than wait. Default 2s.
	FallbackMaxWait time.Duration
	// Backoff shapes retry delays; zero fields take its defaults.
	Backoff Backoff
	// RetryBudget is the retries each successful call earns across the
	// worker (see RetryBudget). Default RetryBudgetRatioDefault.
	RetryBudget float64
	// Lease is how long a claim keeps other workers off a running job; it
	// is extended before each attempt. Default 2m.
	Lease time.Duration
	// ShutdownTimeout bounds how long Stop waits for in-flight jobs before
	// it hands them back to the broker. Default 30s.
	ShutdownTimeout time.Duration
	// AgingStep is the wait that lifts a job one priority level.
	// Default AgingStepDefault.
	AgingStep time.Duration
	// MaxMessageBytes limits one message; 0 = 1 MiB, -1 = no limit.
	MaxMessageBytes int
	// Owner names this worker in job leases. Default host:pid:random.
	Owner string

	// Logger receives the worker's logs. nil = slog.Default().
	Logger *slog.Logger
	// Registerer receives the worker's metrics. nil = not registered.
	Registerer prometheus.Registerer
	// Clock is the worker's time: shaping waits, priority aging, backoff,
	// deadlines, lease rechecks and the gauges' refresh. nil = the system
	// clock.
	Clock clockwork.Clock
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = MaxInFlightDefault
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = MaxAttemptsDefault
	}
	if c.FallbackAfter <= 0 {
		c.FallbackAfter = FallbackAfterDefault
	}
	if c.FallbackMaxWait <= 0 {
		c.FallbackMaxWait = FallbackMaxWaitDefault
	}
	c.Backoff = c.Backoff.WithDefaults()
	if c.Lease <= 0 {
		c.Lease = LeaseDefault
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = ShutdownTimeoutDefault
	}
	if c.AgingStep <= 0 {
		c.AgingStep = AgingStepDefault
	}
	if c.Owner == "" {
		host, _ := os.Hostname()
		c.Owner = host + ":" + strconv.Itoa(os.Getpid()) + ":" + uuid.NewString()[:8]
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.Subscriber == nil {
		errs = append(errs, errors.New("worker: Config.Subscriber is required"))
	}
	if c.Store == nil {
		errs = append(errs, errors.New("worker: Config.Store is required"))
	}
	if c.Upstream == nil {
		errs = append(errs, errors.New("worker: Config.Upstream is required"))
	}
	if c.DeadLetters == nil {
		errs = append(errs, errors.New("worker: Config.DeadLetters is required"))
	}
	if _, err := shaping.ParseStrategy(string(c.Strategy)); err != nil {
		errs = append(errs, fmt.Errorf("worker: Config.Strategy: %w", err))
	}
	return errors.Join(errs...)
}
