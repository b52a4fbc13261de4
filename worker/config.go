package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
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
	IngestWindowDefault    = 10000
	// TenantCapDefault is the most jobs one tenant may hold queued or in
	// flight from ingest: ten ingest windows.
	TenantCapDefault      = 100000
	IngestBatchDefault    = 256
	IngestPrefetchDefault = 512
	ClaimHorizonDefault   = time.Second
	ReapIntervalDefault   = 5 * time.Second
	LedgerPeriodDefault   = 500 * time.Millisecond
	LedgerLeaseDefault    = 3 * time.Second
	StoreRetryMaxDefault  = 30 * time.Second
	// SizeOrderDefault: a job sorts as if recorded fifty times its own
	// time at the model's TPM later. A 2,000-token document at 60k TPM
	// (2 s of the quota) sorts 100 s later, more than the two aging steps
	// (60 s) between high and low priority: when the TPM binds, questions
	// of every priority go before the documents recorded with them, and a
	// small quota finishes many more jobs (docs/design/queue-of-record.md).
	// At 2M TPM the same document sorts 3 s later.
	SizeOrderDefault = 50.0
	// AgingStepDefault is how long a job waits to gain one priority level,
	// in Postgres (store.AgingStepDefault) and in a lane's queue.
	AgingStepDefault = store.AgingStepDefault
)

// FallbackTrigger is a failure that may move a job to its next fallback
// model (Config.FallbackOn).
type FallbackTrigger string

const (
	// FallbackOnRateLimit: the model answers 429 (ClassRateLimited).
	FallbackOnRateLimit FallbackTrigger = "rate_limit"
	// FallbackOnServerError: the model answers 5xx.
	FallbackOnServerError FallbackTrigger = "server_error"
	// FallbackOnTimeout: the call to the model times out.
	FallbackOnTimeout FallbackTrigger = "timeout"
)

// FallbackTriggers are the values of Config.FallbackOn.
var FallbackTriggers = []FallbackTrigger{FallbackOnRateLimit, FallbackOnServerError, FallbackOnTimeout}

// JobStore is what the worker needs of the job store: ingest, claims, the
// holder's fenced writes, the result, the sweeps and the figures of the
// queue. [*store.Queue] implements it; its methods document the
// transitions and errors (store.ErrLeaseLost, store.ErrTerminal,
// store.ErrInvalidJob) the worker relies on.
type JobStore interface {
	// Ingest records decoded jobs as queued (a duplicate is left alone).
	Ingest(ctx context.Context, jobs []store.NewJob) (created []bool, err error)
	// ClaimWithin takes queued jobs of one model (→ running) in claim
	// order, and reports whether r.TokenRoom left one queued.
	ClaimWithin(ctx context.Context, r store.ClaimRequest) ([]*store.JobRecord, bool, error)
	// ReleaseClaim hands back (→ queued) the jobs a claim whose answer
	// was lost took, if it was written.
	ReleaseClaim(ctx context.Context, u *store.UnansweredClaimError) ([]store.Key, error)
	// Heartbeat renews the leases held of owner's jobs and returns those
	// it renewed.
	Heartbeat(ctx context.Context, owner string, lease time.Duration, held []store.Lease) ([]store.Lease, error)
	// ReapExpired hands back jobs whose lease expired (→ queued).
	ReapExpired(ctx context.Context) ([]store.Key, error)
	// ExpireOverdue ends queued jobs whose deadline passed (→ expired).
	ExpireOverdue(ctx context.Context) ([]store.Key, error)
	// MarkCalling records a call before it starts (attempts + 1).
	MarkCalling(ctx context.Context, l store.Lease, st store.PolicyState) (attempts int, err error)
	// MarkRetrying records a retryable failure (→ retrying).
	MarkRetrying(ctx context.Context, l store.Lease, st store.PolicyState, code, msg string) error
	// Release hands a held job back (→ queued).
	Release(ctx context.Context, l store.Lease) error
	// StoreResult records the answer (→ succeeded), once, whatever the
	// lease.
	StoreResult(ctx context.Context, k store.Key, r store.Result) (stored bool, err error)
	// EndAttempt records the answer to a job's call when no write of
	// the job carries it (store/attempts.go).
	EndAttempt(ctx context.Context, k store.Key, a store.Answer) error
	// MarkFailed records a permanent failure (→ failed).
	MarkFailed(ctx context.Context, l store.Lease, status int, code, msg string) error
	// MarkExpired records a job whose deadline passed before it started.
	MarkExpired(ctx context.Context, l store.Lease, why string) error
	// QueuedModels lists the models of the queued jobs; QueuedCount
	// counts the queued jobs up to limit (the ingest window); QueueStats
	// gives the figures of the drain estimate.
	QueuedModels(ctx context.Context) ([]string, error)
	QueuedCount(ctx context.Context, limit int64) (int64, error)
	// QueueTenants and CountQueued give each tenant's jobs queued and in
	// flight (the ingest's tenant caps and shares of the window).
	QueueTenants(ctx context.Context, since time.Time) ([]store.TenantQueue, error)
	CountQueued(ctx context.Context, tenants []string, limits []int64) ([]int64, error)
	QueueStats(ctx context.Context, since time.Time, limit int64) (store.QueueStats, error)
	// SetModelState records what a model's scheduler holds back.
	SetModelState(ctx context.Context, st store.ModelState) error
	// SetScopeStates records the tenants and projects the scheduler holds
	// for their own quota, and frees the others.
	SetScopeStates(ctx context.Context, worker string, held, freed []store.ScopeRef) error
	// Ping tells a database that is down from a write it refuses.
	Ping(ctx context.Context) error
}

// QueuedListener tells the worker of jobs recorded elsewhere (by the API,
// by another replica) as they are recorded. [*store.Queue] implements it
// with LISTEN/NOTIFY (store.JobQueuedChannel).
type QueuedListener interface {
	// ListenJobsQueued listens until ctx ends or its connection fails:
	// it calls listening once it listens, then queued with the model of
	// every statement's newly queued jobs.
	ListenJobsQueued(ctx context.Context, listening func(), queued func(model string)) error
}

// QuotaLedger is the quota ledger the replicas share a provider's quota
// through (docs/design/replicas.md). [*store.Ledger] implements it.
type QuotaLedger interface {
	// RenewQuotas writes the replica's rows and returns the live rows of
	// their keys, its own included.
	RenewQuotas(ctx context.Context, replica string, lease time.Duration, claims []store.QuotaClaim) ([]store.LedgerEntry, error)
	// LeaveQuotas deletes the replica's rows.
	LeaveQuotas(ctx context.Context, replica string) error
}

// DeadLetterer takes the jobs that must not be retried any more: it records
// the letter, publishes it to the dead-letter queue, marks the job
// dead_lettered (fenced to dlq.Letter.LeaseToken when set) and raises an
// alert. [dlq.Writer] implements it.
type DeadLetterer interface {
	DeadLetter(ctx context.Context, l dlq.Letter) error
}

// Router says when deferrable jobs belong to the Batch API lane (package
// batchapi's Router): while it holds, the worker's claims leave undecided
// deferrable jobs queued for the batch lane's collector.
type Router interface {
	// Hold decides at now, the live lane draining in drain.
	Hold(now time.Time, drain time.Duration) BatchHold
}

// BatchHold is a Router's decision.
type BatchHold struct {
	// Hold leaves undecided deferrable jobs to the batch lane, except
	// those whose deadline is at or before DeadlineAfter.
	Hold          bool
	DeadlineAfter time.Time
	// LiveReason is recorded as the lane reason of a deferrable job the
	// live lane takes.
	LiveReason string
}

// Config configures a Worker. Fields marked required have no default.
type Config struct {
	// Subscriber delivers the job messages. Required.
	Subscriber transport.Subscriber
	// ResultsTopic, when set, is where the result event of a job that
	// names no reply of its own goes (Kafka: the deployment's results
	// topic); "" for none (docs/design/notifications.md).
	ResultsTopic string
	// TenantReplies, when set, overrides ResultsTopic per tenant: the
	// tenant's results topic and webhook for its jobs that name no reply
	// of their own, read at each job (internal/tenantroutes serves them
	// live from the database).
	TenantReplies TenantReplier
	// Routed, when set, is told each time this worker has committed the
	// end of a job with a route (its result event is in the outbox): the
	// process's Notifier.Wake, so the event goes out without waiting for
	// the notifier's interval. Nil: nobody is told.
	Routed func()
	// Store holds the jobs' state (a *store.Queue). Required.
	Store JobStore
	// Upstream makes the chat completion calls (OpenAIUpstream over
	// NewOpenAIClient). Required.
	Upstream Upstream
	// DeadLetters takes exhausted and poison jobs. Required.
	DeadLetters DeadLetterer
	// Router, when set, holds deferrable jobs for the batch lane.
	Router Router
	// Budgets, when set, accounts the calls of the tenants and projects
	// with a budget in Tenants (budget.go); BudgetAlerts, when set, sends
	// their thresholds. nil = no budget is enforced.
	Budgets      BudgetStore
	BudgetAlerts BudgetAlerter
	// Chunks, when set, carries the chunks of the calls streamed to the
	// API's callers (stream.go). nil: every call runs without streaming.
	Chunks ChunkStore
	// LaneRates, when set, records every second what each lane runs at,
	// for the API's predictions (lanerates.go). nil: none is recorded.
	LaneRates LaneRateWriter

	// Strategy is the shaping strategy of every lane. "" = shape when a
	// model's quota is known, adaptive when not.
	Strategy shaping.Strategy
	// Catalog holds each model's quota (which shapes its lane), context
	// window (checked before a fallback), prices (the cost stored with each
	// result) and fallbacks; a model it does not list uses Catalog.Default.
	Catalog llmq.Catalog
	// Pools are the models served by several upstreams (a base URL and an
	// API key each, pool.go): each entry has its own lane, ledger key,
	// incident breaker and client, and a job moves to another entry of
	// its model before any fallback model. A model without a pool calls
	// Upstream on the model's own quota. nil: no pools.
	Pools map[string][]PoolEntry
	// Tenants are the configured tenants: the tenant label of the
	// per-tenant metrics names them, and TenantOther the rest. nil: every
	// tenant is TenantOther.
	Tenants llmq.Tenants
	// LiveTenants, when set, is read at every use instead of Tenants:
	// the tenants kept as data, changed at run time (the app's
	// tenancy watcher; docs/design/tenants.md#tenants-as-data). Call
	// Worker.TenantsChanged when they change.
	LiveTenants func() llmq.Tenants
	// Estimator counts prompt tokens. nil = a new shaping.Estimator.
	Estimator *shaping.Estimator

	// MaxInFlight bounds the jobs this worker holds (claimed: waiting for
	// admission, calling or backing off). Default 256.
	MaxInFlight int
	// IngestWindow: ingestion pauses while Postgres holds this many queued
	// jobs or more, so the overflow stays in the broker. Default 10,000;
	// -1 = no window.
	IngestWindow int
	// TenantCap is the most jobs one tenant may hold queued or in flight
	// from ingest: its messages past it are dead-lettered
	// tenant_queue_full (docs/design/admission.md). A tenant past its
	// share of IngestWindow does not pause ingestion. 0 = TenantCapDefault;
	// -1 = no cap.
	TenantCap int
	// IngestBatch bounds the messages recorded by one statement. Default
	// 256.
	IngestBatch int
	// IngestPrefetch is the subscriber's prefetch the worker is built for
	// (messages delivered and not yet recorded); the caller opens the
	// subscriber with it. Default 512.
	IngestPrefetch int
	// ClaimHorizon: a model's scheduler claims the jobs its lane can admit
	// within this horizon (counted in typical requests; in tokens, only
	// what the lane's buckets hold now). Default 1s.
	ClaimHorizon time.Duration
	// MaxAttempts bounds the upstream calls of one job, fallbacks included,
	// over all its claims. Default 6.
	MaxAttempts int
	// FallbackAfter is how many rate-limited calls a model gets before the
	// job moves to the next fallback model. Default 3.
	FallbackAfter int
	// FallbackMaxWait is the longest wait on a rate-limited model (its
	// Retry-After, or its lane's pause after 429s) before a job with a
	// fallback moves on at once rather than wait. Default 2s.
	FallbackMaxWait time.Duration
	// FallbackOn lists the failures that move a job to its next fallback
	// model, FallbackAfter of them on one model (or one with a Retry-After
	// past FallbackMaxWait). Default [FallbackOnRateLimit]: another model
	// rarely helps with a provider's outage. Other failures are retried on
	// the same model.
	FallbackOn []FallbackTrigger
	// Backoff shapes retry delays and caps every Retry-After (its
	// MaxRetryAfter, the lane's pause after a 429 included); zero fields
	// take its defaults.
	Backoff Backoff
	// RetryBudget is the retries each successful call earns across the
	// worker (see RetryBudget). Default RetryBudgetRatioDefault.
	RetryBudget float64
	// Lease is how long a claim keeps other workers off a job unless
	// renewed; a job whose worker died is claimed again once it ends.
	// Default 2m.
	Lease time.Duration
	// HeartbeatInterval is how often the leases this worker holds are
	// renewed. Default Lease/3.
	HeartbeatInterval time.Duration
	// ReapInterval is how often expired leases are handed back and overdue
	// queued jobs expired. Default 5s.
	ReapInterval time.Duration
	// StoreRetryMax caps the wait between two tries of a write that failed
	// on a database error (a result, above all, is retried until it
	// lands). Default 30s.
	StoreRetryMax time.Duration
	// ShutdownTimeout bounds how long Stop waits for calls in flight and
	// results being stored before it hands the rest back. Default 30s.
	ShutdownTimeout time.Duration
	// AgingStep is the wait that lifts a job one priority level in a
	// lane's queue. Default AgingStepDefault.
	AgingStep time.Duration
	// SizeOrder orders the queued jobs by size when the
	// model's TPM is known: a job sorts as if recorded SizeOrder times its
	// estimated tokens' time at that TPM later (store.NewJob.SizeDelay),
	// so short questions are not held behind long documents and a long
	// document is passed only by jobs recorded within that time after it.
	// 0 = SizeOrderDefault; negative = first come, first served.
	SizeOrder float64
	// MaxMessageBytes limits one message; 0 = 1 MiB, -1 = no limit.
	MaxMessageBytes int
	// Owner names this worker in job leases. Default host:pid:random.
	Owner string

	// Queued, when set, wakes the claims as jobs are recorded elsewhere
	// (docs/design/queue-of-record.md, "The claim"). nil = such jobs are
	// claimed once the claim rounds read the models with queued jobs
	// again (every 500 ms), unless their model's backlog keeps it in the
	// rounds: a gateway call waits up to half a second more.
	Queued QueuedListener

	// Ledger, when set, makes the replicas on one QuotaScope share each
	// model's provider quota: every lane runs on the share the ledger
	// gives it (docs/design/replicas.md). nil = the worker runs on the
	// whole quota, as the only client of its API key.
	Ledger QuotaLedger
	// QuotaScope names the provider and the API key the lanes spend
	// (QuotaScopeOf); with the model it is the ledger's quota key.
	// Required with Ledger.
	QuotaScope string
	// Replica names this worker in the ledger. Default Owner (host, pid
	// and a random part: workers in one process are replicas too).
	Replica string
	// LedgerPeriod is how often the worker renews its ledger rows with its
	// demand and sets its lanes' shares. Default 500ms.
	LedgerPeriod time.Duration
	// LedgerLease is how long a row counts unless renewed: the share of a
	// replica that died goes to the others after it. Default 3s; longer
	// than LedgerPeriod.
	LedgerLease time.Duration

	// The provider-incident breaker of each lane (incident.go): when at
	// least IncidentMinCalls calls of the last IncidentWindow were made and
	// at least IncidentFailureRatio of them failed (5xx, timeouts), when
	// five calls in a row within IncidentWindow failed so, when
	// three calls in a row get no answer (connection refused or reset) or
	// one a 401, the lane holds its jobs and lets one through as a probe
	// every IncidentProbeEvery (a lane held on calls in a row probes at once
	// first).
	// Defaults 20, 0.5, 1m, 15s; IncidentMinCalls -1 turns it off.
	IncidentMinCalls     int
	IncidentFailureRatio float64
	IncidentWindow       time.Duration
	IncidentProbeEvery   time.Duration
	// OutageLimit is how long into an outage the calls that fail for the
	// provider (no answer, a 401, a failed probe) cost their jobs no
	// attempt. Default OutageLimitDefault; negative (-1): every call
	// counts.
	OutageLimit time.Duration

	// Capacity normalisation (capacity.go, reported by the
	// llmq_capacity_* gauges): a model's allocatable capacity is its
	// lane's limit x the health factor x CapacitySafety - the limit x
	// CapacityReserved (kept for high-priority work and retries); health
	// falls with the share of the last 100 calls that failed (5xx,
	// timeout) and with their p95 latency above CapacityTailLatency.
	// Defaults 0.9, 0.1 (-1: none), 30s.
	CapacitySafety      float64
	CapacityReserved    float64
	CapacityTailLatency time.Duration

	// Logger receives the worker's logs. nil = slog.Default().
	Logger *slog.Logger
	// Registerer receives the worker's metrics. nil = not registered.
	Registerer prometheus.Registerer
	// Clock is the worker's time: shaping waits, priority aging, backoff,
	// deadlines, heartbeats, sweeps, claims and the gauges' refresh. nil =
	// the system clock.
	Clock clockwork.Clock
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.MaxInFlight = cmp.Or(max(0, c.MaxInFlight), MaxInFlightDefault)
	c.IngestWindow = cmp.Or(c.IngestWindow, IngestWindowDefault)
	c.TenantCap = cmp.Or(c.TenantCap, TenantCapDefault)
	c.IngestBatch = cmp.Or(max(0, c.IngestBatch), IngestBatchDefault)
	c.IngestPrefetch = cmp.Or(max(0, c.IngestPrefetch), IngestPrefetchDefault)
	c.ClaimHorizon = cmp.Or(max(0, c.ClaimHorizon), ClaimHorizonDefault)
	c.MaxAttempts = cmp.Or(max(0, c.MaxAttempts), MaxAttemptsDefault)
	c.FallbackAfter = cmp.Or(max(0, c.FallbackAfter), FallbackAfterDefault)
	c.FallbackMaxWait = cmp.Or(max(0, c.FallbackMaxWait), FallbackMaxWaitDefault)
	if len(c.FallbackOn) == 0 {
		c.FallbackOn = []FallbackTrigger{FallbackOnRateLimit}
	}
	c.Backoff = c.Backoff.WithDefaults()
	c.Lease = cmp.Or(max(0, c.Lease), LeaseDefault)
	c.HeartbeatInterval = cmp.Or(max(0, c.HeartbeatInterval), c.Lease/3)
	c.ReapInterval = cmp.Or(max(0, c.ReapInterval), ReapIntervalDefault)
	c.StoreRetryMax = cmp.Or(max(0, c.StoreRetryMax), StoreRetryMaxDefault)
	c.ShutdownTimeout = cmp.Or(max(0, c.ShutdownTimeout), ShutdownTimeoutDefault)
	c.AgingStep = cmp.Or(max(0, c.AgingStep), AgingStepDefault)
	if c.SizeOrder == 0 {
		c.SizeOrder = SizeOrderDefault
	}
	if c.Owner == "" {
		host, _ := os.Hostname()
		c.Owner = host + ":" + strconv.Itoa(os.Getpid()) + ":" + uuid.NewString()[:8]
	}
	c.Replica = cmp.Or(c.Replica, c.Owner)
	c.LedgerPeriod = cmp.Or(max(0, c.LedgerPeriod), LedgerPeriodDefault)
	c.LedgerLease = cmp.Or(max(0, c.LedgerLease), LedgerLeaseDefault)
	c.IncidentMinCalls = cmp.Or(c.IncidentMinCalls, IncidentMinCallsDefault)
	c.IncidentFailureRatio = cmp.Or(c.IncidentFailureRatio, IncidentFailureRatioDefault)
	c.IncidentWindow = cmp.Or(c.IncidentWindow, IncidentWindowDefault)
	c.IncidentProbeEvery = cmp.Or(c.IncidentProbeEvery, IncidentProbeEveryDefault)
	c.OutageLimit = cmp.Or(c.OutageLimit, OutageLimitDefault)
	c.CapacitySafety = cmp.Or(c.CapacitySafety, CapacitySafetyDefault)
	c.CapacityReserved = cmp.Or(c.CapacityReserved, CapacityReservedDefault)
	c.CapacityTailLatency = cmp.Or(c.CapacityTailLatency, CapacityTailLatencyDefault)
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
	for i, t := range c.FallbackOn {
		if !slices.Contains(FallbackTriggers, t) {
			errs = append(errs, fmt.Errorf("worker: Config.FallbackOn[%d]: %q: want one of %v", i, t, FallbackTriggers))
		}
	}
	if c.TenantCap < -1 {
		errs = append(errs, fmt.Errorf("worker: Config.TenantCap must be positive, or -1 for none; got %d", c.TenantCap))
	}
	if c.IngestWindow < -1 {
		errs = append(errs, fmt.Errorf("worker: Config.IngestWindow must be positive, or -1 for none; got %d", c.IngestWindow))
	}
	if c.HeartbeatInterval >= c.Lease {
		errs = append(errs, fmt.Errorf("worker: Config.HeartbeatInterval (%v) must be shorter than Config.Lease (%v)", c.HeartbeatInterval, c.Lease))
	}
	if c.Ledger != nil && c.QuotaScope == "" {
		errs = append(errs, errors.New("worker: Config.QuotaScope is required with Config.Ledger"))
	}
	if !(c.CapacitySafety > 0 && c.CapacitySafety <= 1) || !(c.CapacityReserved == -1 || c.CapacityReserved >= 0 && c.CapacityReserved < 1) || c.CapacityTailLatency < 0 {
		errs = append(errs, fmt.Errorf("worker: Config.CapacitySafety must be in (0, 1], CapacityReserved -1 (none) or in [0, 1), "+
			"CapacityTailLatency not negative; got %v, %v, %v", c.CapacitySafety, c.CapacityReserved, c.CapacityTailLatency))
	}
	if c.IncidentMinCalls < -1 || c.IncidentFailureRatio <= 0 || c.IncidentFailureRatio > 1 || c.IncidentWindow < 0 || c.IncidentProbeEvery < 0 {
		errs = append(errs, fmt.Errorf("worker: Config.IncidentMinCalls must be -1 (off) or more, IncidentFailureRatio in (0, 1], "+
			"IncidentWindow and IncidentProbeEvery positive (got %d, %v, %v, %v)",
			c.IncidentMinCalls, c.IncidentFailureRatio, c.IncidentWindow, c.IncidentProbeEvery))
	}
	for _, model := range slices.Sorted(maps.Keys(c.Pools)) {
		errs = append(errs, c.validatePool(model)...)
	}
	if c.LedgerLease <= c.LedgerPeriod {
		errs = append(errs, fmt.Errorf("worker: Config.LedgerLease (%v) must be longer than Config.LedgerPeriod (%v)", c.LedgerLease, c.LedgerPeriod))
	}
	return errors.Join(errs...)
}

// validatePool checks the pool of model.
func (c Config) validatePool(model string) []error {
	var errs []error
	pool := c.Pools[model]
	if len(pool) > maxPoolEntries {
		errs = append(errs, fmt.Errorf("worker: Config.Pools[%q]: at most %d entries; got %d", model, maxPoolEntries, len(pool)))
	}
	names := map[string]bool{}
	for i, e := range pool {
		at := fmt.Sprintf("worker: Config.Pools[%q][%d]", model, i)
		if e.Name == "" || names[e.Name] {
			errs = append(errs, fmt.Errorf("%s.Name: required, unique in the pool; got %q", at, e.Name))
		}
		names[e.Name] = true
		if e.Upstream == nil {
			errs = append(errs, fmt.Errorf("%s.Upstream is required", at))
		}
		if c.Ledger != nil && e.QuotaScope == "" {
			errs = append(errs, fmt.Errorf("%s.QuotaScope is required with Config.Ledger", at))
		}
		if e.RPM < 0 || e.TPM < 0 || e.Concurrency < 0 || e.ContextWindow < 0 || e.InputPricePer1M < 0 || e.OutputPricePer1M < 0 {
			errs = append(errs, fmt.Errorf("%s: limits, context window and prices must not be negative", at))
		}
	}
	return errs
}
