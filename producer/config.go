package producer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
)

// Defaults of Config and SweeperConfig.
const (
	// SoftDepthDefault is the depth from which the state is throttled.
	SoftDepthDefault = 10000
	// HardDepthDefault is the depth from which jobs are refused.
	HardDepthDefault = 100000
	// DepthTTLDefault is how long a queue measurement is reused.
	DepthTTLDefault = time.Second
	// ProbeTimeoutDefault bounds one measurement (broker and Postgres).
	ProbeTimeoutDefault = 2 * time.Second
	// RateWindowDefault is the window of the completion rate.
	RateWindowDefault = 5 * time.Minute
	// NoConsumerAfterDefault is how long jobs wait with no worker
	// consuming before the state is StateNoConsumer.
	NoConsumerAfterDefault = 30 * time.Second
	// RetryAfterDefault is the hint when no completion was measured.
	RetryAfterDefault = 30 * time.Second
	// RetryAfterMax caps every retry hint.
	RetryAfterMax = 10 * time.Minute
	// MaxBatchDefault is the most jobs of one PublishBatch.
	MaxBatchDefault = 1000
	// PublishTimeoutDefault bounds the publish of recorded jobs (it runs
	// on after the caller's context is cancelled: the rows exist).
	PublishTimeoutDefault = 10 * time.Second

	// SweepGraceDefault is how old an unconfirmed row must be before the
	// sweeper republishes it.
	SweepGraceDefault = 30 * time.Second
	// SweepIntervalDefault is the time between sweeps.
	SweepIntervalDefault = 10 * time.Second
	// SweepLimitDefault is the most rows republished per round trip.
	SweepLimitDefault = 500
)

// KeyBy says what keys a job's Kafka message (RabbitMQ ignores keys).
type KeyBy string

const (
	// KeyByID keys a message by its job id: one tenant's backlog spreads
	// over every partition (and so over every worker of the group).
	KeyByID KeyBy = "id"
	// KeyByTenant keys a message by its tenant: a tenant's jobs stay in one
	// partition, in order, and one worker takes them all.
	KeyByTenant KeyBy = "tenant"
	// KeyByDefault is the default Config.KeyBy.
	KeyByDefault = KeyByID
)

// Valid reports whether k is KeyByID or KeyByTenant.
func (k KeyBy) Valid() bool { return k == KeyByID || k == KeyByTenant }

// DeadLetterer records a job the outbox cannot publish as a dead letter and
// moves the job to dead_lettered, once however often it is called;
// *dlq.Writer is one.
type DeadLetterer interface {
	DeadLetter(ctx context.Context, l dlq.Letter) error
}

// DepthProbe measures the broker side of the queue; a
// [transport.Subscriber] that is never consumed is one.
type DepthProbe interface {
	Depth(ctx context.Context) (int64, error)
}

// Store is what a Producer needs of the job store: the outbox (jobs
// recorded before they are published) and the queue's Postgres figures.
// *store.Outbox is one.
type Store interface {
	// InsertOutbox records jobs (with their estimates) as queued and not
	// yet published, all or none, and says for each whether it was
	// created and its status.
	InsertOutbox(ctx context.Context, jobs []store.NewJob) ([]store.Recorded, error)
	// InsertOutboxPublishing records jobs as published in a transaction
	// that commits once publish (which sends the created ones) returns;
	// when publish fails, they are recorded unpublished. Each of the
	// producer's flushes (4 at once) holds a connection while it
	// publishes: the pool needs more (store.Open's default is 24).
	InsertOutboxPublishing(ctx context.Context, jobs []store.NewJob, publish func([]store.Recorded) error) ([]store.Recorded, error)
	// MarkPublished records the broker's confirm of the jobs keys.
	MarkPublished(ctx context.Context, keys []store.Key) error
	// Unpublished returns up to limit queued jobs created before cutoff
	// whose publish was never confirmed, oldest first.
	Unpublished(ctx context.Context, cutoff time.Time, limit int) ([]*store.JobRecord, error)
	// QueueStats counts the jobs queued and in flight, those finished
	// since since, and says whether a worker is consuming.
	QueueStats(ctx context.Context, since time.Time, limit int64) (store.QueueStats, error)
	// QueueTenants lists the tenants holding jobs, with their jobs in
	// flight and finished since since.
	QueueTenants(ctx context.Context, since time.Time) ([]store.TenantQueue, error)
	// CountQueued counts each tenant's queued jobs up to its limit.
	CountQueued(ctx context.Context, tenants []string, limits []int64) ([]int64, error)
	// CountProjects counts the jobs of a tenant's projects queued (among
	// its first limit queued jobs) or in flight.
	CountProjects(ctx context.Context, tenant string, projects []string, limit int64) ([]int64, error)
}

// Config configures a Producer. Fields marked required have no default.
type Config struct {
	// Publisher sends the job messages. Required.
	Publisher transport.Publisher
	// Store records the jobs. Required.
	Store Store
	// Destination is the Kafka topic or RabbitMQ queue. Required.
	Destination string
	// DepthProbe measures the messages waiting at the broker (Kafka
	// consumer-group lag of the workers' group, RabbitMQ ready messages).
	// nil: the broker figure is 0 (only Postgres is measured).
	DepthProbe DepthProbe
	// SoftDepth is the depth from which the state is throttled.
	// 0 = SoftDepthDefault.
	SoftDepth int64
	// HardDepth is the depth from which jobs are refused; it must exceed
	// SoftDepth. 0 = HardDepthDefault. Each tenant is throttled and
	// refused first at its own share of both (TenantQueue): the queue's
	// are the last resort.
	HardDepth int64
	// Tenants are the tenants' weights and depths (llmq.Scope SoftDepth,
	// HardDepth) their shares of the queue follow, and their projects'
	// depths. nil: every tenant has llmq.WeightDefault and its weighted
	// share, no project a depth of its own.
	Tenants llmq.Tenants
	// LiveTenants, when set, is read at every use instead of Tenants:
	// the tenants kept as data, changed at run time
	// (docs/design/tenants.md#tenants-as-data).
	LiveTenants func() llmq.Tenants
	// TenantReplies, when set, gives a job that names no route of its own
	// its tenant's (a results topic or reply queue, a webhook), read at
	// each job (internal/tenantroutes serves them live); ResultsTopic,
	// when set, is the route of the others. As the worker's ingest routes
	// the jobs it records (docs/design/notifications.md). nil and "":
	// jobs keep their own route only.
	TenantReplies func(tenant string) (llmq.Reply, bool)
	ResultsTopic  string
	// DepthTTL is how long a measurement is reused (PublishBatch goes on
	// with an expired one for up to ProbeTimeout more while one goroutine
	// takes the next). 0 = DepthTTLDefault;
	// -1 = measure on every call.
	DepthTTL time.Duration
	// ProbeTimeout bounds one measurement. 0 = ProbeTimeoutDefault.
	ProbeTimeout time.Duration
	// RateWindow is the window of the completion rate.
	// 0 = RateWindowDefault.
	RateWindow time.Duration
	// QuotaRatePerMin is the jobs per minute the configured quotas allow
	// (worker.QuotaRate): the drain estimate's rate before any job finished
	// in RateWindow. 0 = unknown: no estimate until a job finishes.
	QuotaRatePerMin float64
	// Predict, when set, predicts when a job would complete for the
	// deadline check, from its model's lanes (store.LaneRates.PredictCompletion): a
	// job whose known prediction passes its deadline is refused, one whose
	// prediction is unknown (no rate learned yet) or fails is admitted.
	// Unset, the queue's drain estimate is compared with the deadline.
	Predict func(ctx context.Context, j *llmq.Job) (store.Prediction, error)
	// NoConsumerAfter is how long jobs wait with no worker consuming (no
	// live lease, no scheduler at work: store.QueueStats.Consuming) before
	// the state is StateNoConsumer. 0 = NoConsumerAfterDefault; -1 = never.
	NoConsumerAfter time.Duration
	// MaxBatch is the most jobs of one PublishBatch. 0 = MaxBatchDefault.
	MaxBatch int
	// Sizer gives each job its estimate and size delay in the claim order
	// before it is recorded, as the worker's ingest does for a job it
	// records (the zero Sizer: none; the worker estimates at the claim).
	Sizer store.Sizer
	// MaxMessageBytes is the largest encoded job accepted: a larger one is
	// refused with a *llmq.TooLargeError before anything is recorded.
	// When the Publisher is a transport.SizeLimiter (Kafka), its broker's
	// limit applies too, whichever is lower. 0 = llmq.MaxMessageBytesDefault;
	// -1 = no limit of llmq's own.
	MaxMessageBytes int
	// KeyBy is the Kafka message key: KeyByID (spread over partitions) or
	// KeyByTenant. "" = KeyByDefault.
	KeyBy KeyBy
	// DeadLetters receives the jobs Sweep cannot publish because the broker
	// refuses the message itself (too large, invalid): each is recorded as
	// a dead letter (reason ReasonUnpublishable) and Sweep goes on with the
	// later jobs. nil: Sweep stops at such a job with an error wrapping
	// ErrUnpublishable, and it and the jobs after it stay unpublished.
	DeadLetters DeadLetterer
	// PublishTimeout bounds the publish and confirm of recorded jobs.
	// 0 = PublishTimeoutDefault.
	PublishTimeout time.Duration

	// Logger receives warnings (failed publishes). nil = slog.Default().
	Logger *slog.Logger
	// Registerer receives the metrics. nil = not registered.
	Registerer prometheus.Registerer
	// Clock is the time source of deadlines, the rate window, the depth
	// cache and the Sweeper; it must agree with the Store's clock.
	// nil = clockwork.NewRealClock().
	Clock clockwork.Clock
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.SoftDepth = cmp.Or(c.SoftDepth, SoftDepthDefault)
	c.HardDepth = cmp.Or(c.HardDepth, HardDepthDefault)
	c.DepthTTL = cmp.Or(c.DepthTTL, DepthTTLDefault)
	c.ProbeTimeout = cmp.Or(c.ProbeTimeout, ProbeTimeoutDefault)
	c.RateWindow = cmp.Or(c.RateWindow, RateWindowDefault)
	c.NoConsumerAfter = cmp.Or(c.NoConsumerAfter, NoConsumerAfterDefault)
	c.MaxBatch = cmp.Or(c.MaxBatch, MaxBatchDefault)
	c.MaxMessageBytes = cmp.Or(c.MaxMessageBytes, llmq.MaxMessageBytesDefault)
	c.KeyBy = cmp.Or(c.KeyBy, KeyByDefault)
	c.PublishTimeout = cmp.Or(c.PublishTimeout, PublishTimeoutDefault)
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
	if c.Publisher == nil {
		errs = append(errs, errors.New("producer: Config.Publisher is required"))
	}
	if c.Store == nil {
		errs = append(errs, errors.New("producer: Config.Store is required"))
	}
	if c.Destination == "" {
		errs = append(errs, errors.New("producer: Config.Destination is required"))
	}
	if c.SoftDepth < 1 {
		errs = append(errs, errors.New("producer: Config.SoftDepth must be positive"))
	}
	if c.HardDepth <= c.SoftDepth {
		errs = append(errs, errors.New("producer: Config.HardDepth must exceed Config.SoftDepth"))
	}
	if c.DepthTTL < -1 {
		errs = append(errs, errors.New("producer: Config.DepthTTL must be positive, or -1"))
	}
	if c.ProbeTimeout < 0 || c.RateWindow < 0 || c.PublishTimeout < 0 || c.QuotaRatePerMin < 0 {
		errs = append(errs, errors.New("producer: Config.ProbeTimeout, RateWindow, PublishTimeout and QuotaRatePerMin must not be negative"))
	}
	if c.NoConsumerAfter < -1 {
		errs = append(errs, errors.New("producer: Config.NoConsumerAfter must be positive, or -1 for never"))
	}
	if c.MaxBatch < 1 {
		errs = append(errs, errors.New("producer: Config.MaxBatch must be positive"))
	}
	if c.MaxMessageBytes < -1 {
		errs = append(errs, errors.New("producer: Config.MaxMessageBytes must be positive, or -1 for no limit"))
	}
	if !c.KeyBy.Valid() {
		errs = append(errs, fmt.Errorf("producer: Config.KeyBy must be %q or %q, got %q", KeyByID, KeyByTenant, c.KeyBy))
	}
	return errors.Join(errs...)
}

// SweeperConfig configures a Sweeper.
type SweeperConfig struct {
	// Producer republishes the rows. Required.
	Producer *Producer
	// Grace is how old an unconfirmed row must be before it is
	// republished: longer than any publish takes. 0 = SweepGraceDefault.
	Grace time.Duration
	// Interval is the time between sweeps. 0 = SweepIntervalDefault.
	Interval time.Duration
	// Limit is the most rows republished per round trip.
	// 0 = SweepLimitDefault.
	Limit int
}

// WithDefaults returns c with every zero field set to its default.
func (c SweeperConfig) WithDefaults() SweeperConfig {
	c.Grace = cmp.Or(c.Grace, SweepGraceDefault)
	c.Interval = cmp.Or(c.Interval, SweepIntervalDefault)
	c.Limit = cmp.Or(c.Limit, SweepLimitDefault)
	return c
}

func (c SweeperConfig) validate() error {
	var errs []error
	if c.Producer == nil {
		errs = append(errs, errors.New("producer: SweeperConfig.Producer is required"))
	}
	if c.Grace < 0 || c.Interval <= 0 || c.Limit < 1 {
		errs = append(errs, errors.New("producer: SweeperConfig.Grace must not be negative, Interval and Limit must be positive"))
	}
	return errors.Join(errs...)
}
