package dlq

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
)

// Defaults of [Config].
const (
	// DLQSuffix is appended to the main topic or queue to name the
	// dead-letter one: jobs -> jobs.dlq.
	DLQSuffix = ".dlq"
	// RepairAfterDefault is how long a letter's DLQ publish (or a replay's
	// republish) may stay unconfirmed before Repair takes it over.
	RepairAfterDefault = time.Minute
	// RepairIntervalDefault is how often a started Writer runs Repair.
	RepairIntervalDefault = time.Minute
	// RepairBatchDefault is how many rows one Repair pass takes of each kind.
	RepairBatchDefault = 100
	// PublishTimeoutDefault bounds one publish of a dead letter or a
	// replay.
	PublishTimeoutDefault = 30 * time.Second
	// LastErrorHeaderMax is the most bytes of the last error put in the
	// x-llmq-last-error header (the stored row keeps all of it).
	LastErrorHeaderMax = 1024
)

// Headers of a message published to the dead-letter queue. The original
// headers are kept; these are added.
const (
	HeaderReason       = "x-llmq-reason"
	HeaderAttempts     = "x-llmq-attempts"
	HeaderLastError    = "x-llmq-last-error"
	HeaderSource       = "x-llmq-source"
	HeaderDeadLetterID = "x-llmq-dead-letter-id"
	// HeaderReplayOf marks a message republished to the main queue by a
	// replay; its value is the dead letter's id.
	HeaderReplayOf = "x-llmq-replay-of"
)

// Notifier takes dead-letter events; [*Alerter] is one.
type Notifier interface {
	Notify(ev Event)
}

// Store is what a [Writer] and a [Service] need of the job store: the
// dead_letters table and the few job moves a dead letter makes.
// *store.DeadLetters is one.
type Store interface {
	// RecordDeadLetter, MarkDeadLetterPublished, UnpublishedDeadLetters,
	// UnfinishedReplays and MarkDeadLettered serve the Writer.
	RecordDeadLetter(ctx context.Context, d store.NewDeadLetter) (rec *store.DeadLetter, created bool, err error)
	MarkDeadLetterPublished(ctx context.Context, id int64) (bool, error)
	UnpublishedDeadLetters(ctx context.Context, olderThan time.Time, limit int) ([]*store.DeadLetter, error)
	UnfinishedReplays(ctx context.Context, olderThan time.Time, limit int) ([]*store.DeadLetter, error)
	MarkDeadLettered(ctx context.Context, k store.Key, code, msg string) error
	// GetDeadLetter, ListDeadLetters, CountDeadLetters, PurgeDeadLetters,
	// BeginReplay, MarkReplayPublished and Requeue serve the Service
	// (Repair purges and completes replays too).
	GetDeadLetter(ctx context.Context, tenant string, id int64) (*store.DeadLetter, error)
	ListDeadLetters(ctx context.Context, o store.DeadLetterListOptions) ([]*store.DeadLetter, string, error)
	CountDeadLetters(ctx context.Context, tenant string, since, until time.Time) ([]store.DeadLetterCount, error)
	PurgeDeadLetters(ctx context.Context, f store.DeadLetterFilter) (int64, error)
	BeginReplay(ctx context.Context, tenant string, id int64) (rec *store.DeadLetter, begun bool, err error)
	MarkReplayPublished(ctx context.Context, id int64) (bool, error)
	Requeue(ctx context.Context, tenant, id string) (*store.JobRecord, error)
	// Job reads the letter's job.
	Job(ctx context.Context, tenant, id string) (*store.JobRecord, error)
}

// Config configures a [Writer] and a [Service]. Fields marked required have
// no default.
type Config struct {
	// Store holds the dead_letters and jobs tables. Required.
	Store Store
	// Publisher publishes dead letters and replays. Required by NewWriter;
	// a Service without one can list, show and purge but not replay.
	Publisher transport.Publisher
	// Destination is the main topic or queue of jobs. Required by
	// NewWriter. Dead letters go to Destination+DLQSuffix; a replay goes
	// back to the destination its letter came from (the letter's DLQ
	// destination without DLQSuffix), or to Destination when that is
	// unknown.
	Destination string
	// Alerter is told about every dead letter once its publish is
	// confirmed. Nil: no alerts.
	Alerter Notifier

	// PublishTimeout bounds one publish to the broker (the worker calls
	// DeadLetter on a context that is never cancelled). Default 30s.
	PublishTimeout time.Duration
	// RepairAfter is how long a publish may stay unconfirmed before Repair
	// retries it. Default 1m.
	RepairAfter time.Duration
	// RepairInterval is how often a started Writer runs Repair. Default 1m.
	RepairInterval time.Duration
	// RepairBatch is the most rows of each kind one Repair pass handles.
	// Default 100.
	RepairBatch int

	// Clock is the time source (letter times, repair timing). Default
	// clockwork.NewRealClock().
	Clock clockwork.Clock
	// Logger receives the dead-letter logs. Default: discard.
	Logger *slog.Logger
	// Registerer receives the llmq_dlq_* metrics. Nil: not registered. A
	// Writer and a Service may share one registry.
	Registerer prometheus.Registerer
}

// WithDefaults returns a copy of c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.PublishTimeout = cmp.Or(c.PublishTimeout, PublishTimeoutDefault)
	c.RepairAfter = cmp.Or(c.RepairAfter, RepairAfterDefault)
	c.RepairInterval = cmp.Or(c.RepairInterval, RepairIntervalDefault)
	c.RepairBatch = cmp.Or(c.RepairBatch, RepairBatchDefault)
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate checks a config that went through WithDefaults; writer says
// whether the Writer's requirements apply.
func (c Config) validate(writer bool) error {
	switch {
	case c.Store == nil:
		return configError("Store", "required")
	case writer && c.Publisher == nil:
		return configError("Publisher", "required")
	case writer && c.Destination == "":
		return configError("Destination", "required")
	case c.PublishTimeout < 0:
		return configError("PublishTimeout", "must not be negative, got %v", c.PublishTimeout)
	case c.RepairAfter < 0:
		return configError("RepairAfter", "must not be negative, got %v", c.RepairAfter)
	case c.RepairInterval < 0:
		return configError("RepairInterval", "must not be negative, got %v", c.RepairInterval)
	case c.RepairBatch < 0:
		return configError("RepairBatch", "must not be negative, got %d", c.RepairBatch)
	}
	return nil
}
