package api

import (
	"cmp"
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
	"github.com/llmq/llmq/internal/tenancy"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/store"
)

// Defaults of Config.
const (
	// MaxBodyBytesDefault limits a request body (a batch of 1,000 jobs of
	// 16 KiB each).
	MaxBodyBytesDefault = 16 << 20
	// RetryAfterUnavailableDefault is the Retry-After of a 503.
	RetryAfterUnavailableDefault = 5 * time.Second
	// GatewayTimeoutDefault is a gateway call's deadline when the request
	// names none: the OpenAI SDKs' own default timeout.
	GatewayTimeoutDefault = 10 * time.Minute
	// GatewayMaxDeadlineDefault is the furthest deadline a gateway call
	// may have: three times the SDKs' default timeout.
	GatewayMaxDeadlineDefault = 30 * time.Minute
	// GatewayMaxWaitingDefault is the gateway calls one tenant may have
	// waiting at once.
	GatewayMaxWaitingDefault = 256
)

// Config configures the API. Fields marked required have no default.
type Config struct {
	// Producer admits, records and publishes jobs and measures the queue.
	// Required.
	Producer *producer.Producer
	// Store reads and cancels jobs. Required.
	Store JobStore
	// Keys maps an API key to its tenant. Empty (and no OperatorKeys):
	// every /v1 request is 401.
	Keys map[string]string
	// OperatorKeys are keys bound to no tenant: they see every tenant
	// (the tenant parameter narrows to one) and may act on everything;
	// the audit log names each by its name. Empty: no operator.
	OperatorKeys []OperatorKey
	// Catalog says which models a job may name (body.model and
	// fallback_models); any other is refused with 400 model_not_allowed.
	// The zero Catalog allows every name. With Tenancy, the models kept
	// as data replace its Models once imported (Watcher.Catalog).
	Catalog llmq.Catalog
	// DeadLetterService, when set, serves the dead letters:
	// GET /v1/dead-letters, /v1/dead-letters/{id} and /reasons, POST
	// /v1/dead-letters/{id}/replay, /replay and /purge. A *dlq.Service is
	// one.
	DeadLetterService DeadLetterService
	// Notifications, when set, serves the result events of jobs with a
	// route: GET /v1/notifications and POST
	// /v1/notifications/{event_id}/replay. A *store.Notifications is one.
	Notifications NotificationStore
	// Batches, when set, serves the provider batches of the batch lane to
	// operator keys: GET /v1/batches and /v1/batches/{id}. A *store.Batches
	// is one.
	Batches BatchStore
	// CancelBatch asks the provider to cancel a batch (llmq or provider
	// id) and returns it after (see batchapi.Cancel). nil: POST
	// /v1/batches/{id}/cancel answers 503.
	CancelBatch func(ctx context.Context, ref string) (*store.BatchRecord, error)
	// Usage, when set, serves GET /v1/usage: the scopes in view with
	// their limits (Tenants) and what they used. A *store.Budgets is one.
	Usage UsageStore
	// Tenants are the configured tenants and projects: their weights and
	// limits, shown by GET /v1/usage.
	Tenants llmq.Tenants
	// Tenancy, when set, serves the tenants and tenant keys kept as data
	// (docs/design/tenants.md#tenants-as-data) in place of Tenants and
	// Keys, changed at run time, and the admin API under /v1/admin
	// (operator keys only) changes them through TenancyStore.
	Tenancy *tenancy.Watcher
	// TenancyStore is what the admin API changes (a *store.Tenancy);
	// required with Tenancy.
	TenancyStore TenancyStore
	// TenantNotifications, when set, serves the tenants' result routes and
	// webhook secrets under /v1/admin (operator keys only).
	TenantNotifications TenantNotificationStore
	// MaxBodyBytes limits a request body (413 above). 0 =
	// MaxBodyBytesDefault.
	MaxBodyBytes int64
	// MaxMessageBytes limits one encoded job. 0 = llmq's default (1 MiB);
	// -1 = no limit.
	MaxMessageBytes int
	// RetryAfterUnavailable is the Retry-After of a 503. 0 =
	// RetryAfterUnavailableDefault.
	RetryAfterUnavailable time.Duration
	// RateLimits bounds the requests per minute of each key and tenant
	// and the failed authentications of each client address.
	RateLimits RateLimitConfig

	// Logger receives server errors. nil = slog.Default().
	Logger *slog.Logger
	// Registerer receives the API's metrics. nil = not registered. The
	// API does not serve them: /metrics is on a listener of its own
	// (internal/app's MetricsListen), so that the port tenants reach
	// shows nothing about other tenants' traffic.
	Registerer prometheus.Registerer
	// Clock checks deadlines against now; it should agree with the
	// producer's. nil = the system clock.
	Clock clockwork.Clock

	// JobsDone tells the gateway's waiting callers that their jobs ended
	// (a [*store.Jobs] is one). nil: gateway mode is off, POST
	// /v1/chat/completions and GET /v1/models are not served. With it, Start
	// and Stop run the listening connection.
	JobsDone JobsDoneListener
	// Streams carries the chunks of streamed gateway calls from the
	// workers (a [*store.Streams] is one; gateway_stream.go). nil: a
	// streamed call is answered once its completion is whole.
	Streams StreamStore
	// Gateway tunes gateway mode.
	Gateway GatewayConfig

	// Limits, when set, makes the API replicas behind one address share
	// the key and tenant limits of RateLimits (a [*store.Ledger] is one;
	// doorshare.go): each replica writes what it let through every
	// LimitPeriod and takes the others' from its buckets. Start and Stop
	// run the exchange. nil: each replica limits alone.
	Limits LimitLedger
	// Replica names this API replica in Limits. "" = host, pid and a
	// random part.
	Replica string
	// LimitPeriod is how often the replica exchanges its counts; 0 =
	// LimitPeriodDefault. LimitLease is how long its counts live
	// unrenewed; 0 = LimitLeaseDefault.
	LimitPeriod, LimitLease time.Duration
}

// GatewayConfig tunes gateway mode (see docs/design/gateway.md).
type GatewayConfig struct {
	// Timeout is a call's deadline when the request gives none (neither
	// X-LLMQ-Deadline nor X-Stainless-Timeout). 0 = GatewayTimeoutDefault.
	Timeout time.Duration
	// Priority is a call's priority without X-LLMQ-Priority. "" = normal.
	Priority llmq.Priority
	// CancelOnDisconnect cancels the job of a caller that disconnects
	// before the job's upstream call began. Default false: the job
	// completes and stays readable through GET /v1/jobs/{id}.
	CancelOnDisconnect bool
	// MaxDeadline is the furthest a call's deadline may be: an
	// X-LLMQ-Deadline past it is refused (400), an X-Stainless-Timeout
	// past it is cut to it. 0 = GatewayMaxDeadlineDefault.
	MaxDeadline time.Duration
	// MaxWaiting is the calls one tenant may have waiting for their job;
	// one more is refused with 429 too_many_waiting_calls before anything
	// is enqueued. 0 = GatewayMaxWaitingDefault; -1 = no limit.
	MaxWaiting int
}

// JobsDoneListener announces the jobs that end; a [*store.Jobs] is one.
type JobsDoneListener interface {
	// ListenJobsDone listens until ctx ends or its connection fails: it
	// calls listening once it listens, then done with each job that ends.
	ListenJobsDone(ctx context.Context, listening func(), done func(store.Key)) error
}

// StreamStore is what the gateway reads of streamed calls; a
// [*store.Streams] is one.
type StreamStore interface {
	// ListenJobChunks listens until ctx ends or its connection fails: it
	// calls listening once it listens, then appended with each job whose
	// stream grew.
	ListenJobChunks(ctx context.Context, listening func(), appended func(store.Key)) error
	// Chunks returns job k's chunks numbered after after, in order.
	Chunks(ctx context.Context, k store.Key, after int) ([]store.Chunk, error)
	// CancelStream asks the worker streaming job k to cut the call.
	CancelStream(ctx context.Context, k store.Key) error
	// DropStream deletes job k's chunks.
	DropStream(ctx context.Context, k store.Key) error
}

// JobStore is what the API reads and changes of the job store; a
// [*store.Jobs] is one.
type JobStore interface {
	// Get returns a tenant's job, or store.ErrNotFound.
	Get(ctx context.Context, tenant, id string) (*store.JobRecord, error)
	// List returns a page of a tenant's jobs and the cursor of the next.
	List(ctx context.Context, o store.ListOptions) ([]*store.JobRecord, string, error)
	// Cancel cancels a job that has not started.
	Cancel(ctx context.Context, tenant, id string) (*store.JobRecord, error)
	// CountByStatus counts a tenant's jobs per status ("" = every
	// tenant), each up to limit (<= 0: all).
	CountByStatus(ctx context.Context, tenant string, limit int64) (map[llmq.Status]int64, error)
	// Attempts returns a job's upstream calls (GET /v1/jobs/{id}).
	Attempts(ctx context.Context, tenant, id string) ([]store.Attempt, error)
	// ModelStats returns the calls per model and minute since a time
	// ("" tenant: every tenant's), for GET /v1/stats/models.
	ModelStats(ctx context.Context, tenant string, since time.Time) ([]store.ModelCalls, error)
	// JobRates returns the jobs recorded and finished per minute since a
	// time ("" tenant: every tenant's), for GET /v1/stats/arrivals.
	JobRates(ctx context.Context, tenant string, since time.Time) ([]store.JobMinute, error)
	// Ping checks the database connection (GET /readyz).
	Ping(ctx context.Context) error
}

// BatchStore is what the API reads of the batch lane's batches; a
// [*store.Batches] is one.
type BatchStore interface {
	// ListBatches returns the newest batches, only those not yet brought
	// home when open.
	ListBatches(ctx context.Context, limit int, open bool) ([]*store.BatchRecord, error)
	// GetBatch returns a batch by llmq or provider id, or
	// store.ErrBatchNotFound.
	GetBatch(ctx context.Context, ref string) (*store.BatchRecord, error)
	// BatchJobCounts counts a batch's jobs per status.
	BatchJobCounts(ctx context.Context, id string) (map[llmq.Status]int, error)
}

// NotificationStore is what the API reads and replays of the
// notifications outbox; a [*store.Notifications] is one.
type NotificationStore interface {
	List(ctx context.Context, f store.NotificationFilter) ([]*store.Notification, error)
	Replay(ctx context.Context, tenant, eventID string, now time.Time) (*store.Notification, error)
	ReplayDead(ctx context.Context, tenant, jobID string, now time.Time) (int64, error)
}

// DeadLetterService is what the API does with dead letters;
// a [*dlq.Service] is one.
type DeadLetterService interface {
	List(ctx context.Context, q store.DeadLetterListOptions) ([]*store.DeadLetter, string, error)
	Get(ctx context.Context, tenant string, id int64) (*store.DeadLetter, error)
	Count(ctx context.Context, tenant string, since, until time.Time) ([]store.DeadLetterCount, error)
	Replay(ctx context.Context, tenant string, id int64) (dlq.ReplayResult, error)
	Purge(ctx context.Context, f store.DeadLetterFilter) (int64, error)
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, MaxBodyBytesDefault)
	c.MaxMessageBytes = cmp.Or(c.MaxMessageBytes, llmq.MaxMessageBytesDefault)
	c.RetryAfterUnavailable = cmp.Or(c.RetryAfterUnavailable, RetryAfterUnavailableDefault)
	c.Gateway.Timeout = cmp.Or(c.Gateway.Timeout, GatewayTimeoutDefault)
	c.Gateway.Priority = cmp.Or(c.Gateway.Priority, llmq.PriorityNormal)
	c.Gateway.MaxDeadline = cmp.Or(c.Gateway.MaxDeadline, GatewayMaxDeadlineDefault)
	c.Gateway.MaxWaiting = cmp.Or(c.Gateway.MaxWaiting, GatewayMaxWaitingDefault)
	c.RateLimits.KeyRPM = cmp.Or(c.RateLimits.KeyRPM, KeyRPMDefault)
	c.RateLimits.TenantRPM = cmp.Or(c.RateLimits.TenantRPM, TenantRPMDefault)
	c.RateLimits.AuthFailuresPerMinute = cmp.Or(c.RateLimits.AuthFailuresPerMinute, AuthFailuresPerMinuteDefault)
	c.RateLimits.MaxClients = cmp.Or(c.RateLimits.MaxClients, RateLimitClientsDefault)
	c.LimitPeriod = cmp.Or(max(0, c.LimitPeriod), LimitPeriodDefault)
	c.LimitLease = cmp.Or(max(0, c.LimitLease), LimitLeaseDefault)
	if c.Replica == "" {
		host, _ := os.Hostname()
		c.Replica = host + ":" + strconv.Itoa(os.Getpid()) + ":" + uuid.NewString()[:8]
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
	if c.Producer == nil {
		errs = append(errs, errors.New("api: Config.Producer is required"))
	}
	if c.Store == nil {
		errs = append(errs, errors.New("api: Config.Store is required"))
	}
	if c.MaxBodyBytes < 1 {
		errs = append(errs, errors.New("api: Config.MaxBodyBytes must be positive"))
	}
	if c.MaxMessageBytes < -1 {
		errs = append(errs, errors.New("api: Config.MaxMessageBytes must be positive, or -1"))
	}
	if c.Gateway.Timeout < 0 {
		errs = append(errs, errors.New("api: Config.Gateway.Timeout must not be negative"))
	}
	if c.Gateway.MaxDeadline < 0 {
		errs = append(errs, errors.New("api: Config.Gateway.MaxDeadline must not be negative"))
	}
	if c.Gateway.Timeout > c.Gateway.MaxDeadline {
		errs = append(errs, fmt.Errorf("api: Config.Gateway.Timeout (%v) must not pass Config.Gateway.MaxDeadline (%v)", c.Gateway.Timeout, c.Gateway.MaxDeadline))
	}
	if c.Gateway.MaxWaiting < -1 {
		errs = append(errs, errors.New("api: Config.Gateway.MaxWaiting must be positive, or -1"))
	}
	for _, l := range []struct {
		name string
		v    int
	}{{"KeyRPM", c.RateLimits.KeyRPM}, {"TenantRPM", c.RateLimits.TenantRPM}, {"AuthFailuresPerMinute", c.RateLimits.AuthFailuresPerMinute}} {
		if l.v < -1 {
			errs = append(errs, fmt.Errorf("api: Config.RateLimits.%s must be positive, or -1", l.name))
		}
	}
	if c.RateLimits.MaxClients < 0 {
		errs = append(errs, errors.New("api: Config.RateLimits.MaxClients must be positive"))
	}
	if !c.Gateway.Priority.Valid() {
		errs = append(errs, fmt.Errorf("api: Config.Gateway.Priority: %q is not high, normal or low", c.Gateway.Priority))
	}
	if (c.Tenancy == nil) != (c.TenancyStore == nil) {
		errs = append(errs, errors.New("api: Config.Tenancy and Config.TenancyStore go together"))
	}
	for k, tenant := range c.Keys {
		if k == "" || !llmq.ValidID(tenant) {
			errs = append(errs, errors.New("api: Config.Keys: every key must be non-empty and map to a valid tenant"))
			break
		}
	}
	names := map[string]bool{}
	for _, k := range c.OperatorKeys {
		if _, tenant := c.Keys[k.Key]; k.Key == "" || tenant || (k.Name != "" && (names[k.Name] || !llmq.ValidID(k.Name))) {
			errs = append(errs, errors.New("api: Config.OperatorKeys: every key must be non-empty and not also in Keys, "+
				"every name an id and unique"))
			break
		}
		names[k.Name] = true
	}
	return errors.Join(errs...)
}
