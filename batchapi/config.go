package batchapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	openai "github.com/sashabaranov/go-openai"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/store"
)

// Defaults of Config.
const (
	// WindowDefault is the off-peak window.
	WindowDefault = "22:00-06:00"
	// TimezoneDefault is the zone of the window.
	TimezoneDefault = "UTC"
	// DrainThresholdDefault is the live drain time above which deferrable
	// jobs go to batches outside the window.
	DrainThresholdDefault = 30 * time.Minute
	// CompletionWindowDefault is the provider's batch completion window.
	CompletionWindowDefault = 24 * time.Hour
	// DeadlineMarginDefault is added to the completion window for a job's
	// deadline to allow the batch lane.
	DeadlineMarginDefault = time.Hour
	// PullBackBeforeDefault: a batch-lane job goes back to the live lane
	// when its deadline is this close.
	PullBackBeforeDefault = 30 * time.Minute
	// FlushIntervalDefault is the longest a pending job waits, from when
	// it was recorded, before a partial batch is submitted.
	FlushIntervalDefault = time.Minute
	// MaxLinesDefault is the provider's limit on requests per batch.
	MaxLinesDefault = 50000
	// MaxBytesDefault is the provider's limit on an input file (200 MB).
	MaxBytesDefault = 200_000_000
	// PollIntervalDefault is how often the service runs the collector and
	// the poller.
	PollIntervalDefault = 30 * time.Second
	// ReconcilePagesDefault bounds the pages of the provider's batch list
	// searched (100 batches each) when a submission is resumed.
	ReconcilePagesDefault = 20
)

// FailedLinePolicy says where a batch line that failed with a permanent
// error (a 4xx other than 408, 409, 429) goes. Transient failures (429,
// 5xx, expired, cancelled) always go back to the live lane.
type FailedLinePolicy string

const (
	// FailedLinesDeadLetter dead-letters the job (the default): the same
	// request would fail live too.
	FailedLinesDeadLetter FailedLinePolicy = "dead_letter"
	// FailedLinesLive retries the job in the live lane.
	FailedLinesLive FailedLinePolicy = "live"
)

// DeadLetterer publishes the dead letter of a job the batch lane gave up on.
// The job row is already dead_lettered when it is called.
type DeadLetterer interface {
	DeadLetter(ctx context.Context, l dlq.Letter) error
}

// Store is what the batch lane needs of the job store; *store.Batches is
// one.
type Store interface {
	// WithAdvisoryLock lets one collector and one poller work at a time.
	WithAdvisoryLock(ctx context.Context, name string, fn func(ctx context.Context) error) (ran bool, err error)
	// OpenBatches, PendingBatchModels, ReserveBatch, BatchJobs,
	// SetBatchInputFile, MarkBatchSubmitted and AbandonBatch serve the
	// Collector.
	OpenBatches(ctx context.Context) ([]*store.BatchRecord, error)
	PendingBatchModels(ctx context.Context, c store.BatchCandidates) ([]store.PendingModel, error)
	ReserveBatch(ctx context.Context, r store.BatchReservation) (*store.BatchRecord, []store.BatchJob, error)
	BatchJobs(ctx context.Context, id string) ([]store.BatchJob, error)
	SetBatchInputFile(ctx context.Context, id, fileID string) error
	MarkBatchSubmitted(ctx context.Context, sub store.BatchSubmission) (int, error)
	AbandonBatch(ctx context.Context, id, errMsg string, live bool, reason string) (int, error)
	// UpdateBatchProgress, BatchJobKeys, IngestBatch, PullBack, Outbox and
	// DeleteOutbox serve the Poller (and Cancel).
	UpdateBatchProgress(ctx context.Context, id string, p store.BatchProgress) error
	BatchJobKeys(ctx context.Context, id string, status llmq.Status) ([]store.Key, error)
	IngestBatch(ctx context.Context, in store.BatchIngest) (store.IngestStats, error)
	PullBack(ctx context.Context, pending, batched time.Time, reason string) ([]store.Key, error)
	Outbox(ctx context.Context, limit int) ([]store.OutboxEntry, error)
	DeleteOutbox(ctx context.Context, keys []store.Key) error
	// GetBatch and BatchCostSummary serve Cancel and CostReport.
	GetBatch(ctx context.Context, ref string) (*store.BatchRecord, error)
	BatchCostSummary(ctx context.Context, since time.Time) (store.BatchCost, error)
}

// Config configures the Router, Collector, Poller and Service. The Router
// needs only the routing fields; the others need Store and Client too.
type Config struct {
	// Store is the Postgres job store. Required except for the Router.
	Store Store
	// Client talks to the provider's Files and Batch API. Required except
	// for the Router.
	Client *openai.Client
	// DeadLetters publishes dead letters; nil: the job row is marked
	// dead_lettered and nothing is published.
	DeadLetters DeadLetterer

	// Window is the off-peak window "HH:MM-HH:MM", which may wrap midnight.
	// "" = WindowDefault; WindowOff disables it.
	Window string
	// Timezone is the IANA zone of Window. "" = TimezoneDefault.
	Timezone string
	// DrainThreshold: outside the window, deferrable jobs go to batches
	// when Drain() exceeds it. 0 = DrainThresholdDefault; -1 disables.
	DrainThreshold time.Duration
	// Drain estimates how long the live lane needs to drain its backlog
	// (the Collector's; the worker gives its own to the Router). nil
	// disables the drain rule for the Collector.
	Drain func() time.Duration
	// CompletionWindow is the provider's completion window ("24h"). 0 =
	// CompletionWindowDefault. Set it lower against a time-scaled simulator.
	CompletionWindow time.Duration
	// DeadlineMargin: a job with a deadline goes to batches only when the
	// deadline is more than CompletionWindow + DeadlineMargin away.
	// 0 = DeadlineMarginDefault; -1 = no margin.
	DeadlineMargin time.Duration
	// PullBackBefore: a batch-lane job goes back live when its deadline is
	// this close. 0 = PullBackBeforeDefault.
	PullBackBefore time.Duration

	// FlushInterval is the longest a pending job waits, from when it was
	// recorded, for its batch to fill. 0 = FlushIntervalDefault.
	FlushInterval time.Duration
	// MaxLines bounds the jobs per batch. 0 = MaxLinesDefault (also the
	// maximum).
	MaxLines int
	// MaxBytes bounds an input file. 0 = MaxBytesDefault (also the maximum).
	MaxBytes int
	// PollInterval is the Service's period. 0 = PollIntervalDefault.
	PollInterval time.Duration
	// FailedLines is the policy for permanently failed lines.
	// "" = FailedLinesDeadLetter.
	FailedLines FailedLinePolicy
	// ReconcilePages bounds the provider list pages searched when resuming
	// a submission. 0 = ReconcilePagesDefault.
	ReconcilePages int
	// Catalog holds each model's prices and batch discount, for the cost
	// stored with each result; a model it does not list costs nothing.
	Catalog llmq.Catalog

	// Logger receives logs. nil = slog.Default().
	Logger *slog.Logger
	// Registerer receives metrics. nil = not registered.
	Registerer prometheus.Registerer
	// Clock is the clock of routing, flush and deadline decisions and of
	// the Service's period; it must agree with the store's clock (pending
	// ages are read from job rows). nil = clockwork.NewRealClock().
	Clock clockwork.Clock
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.Window = cmp.Or(c.Window, WindowDefault)
	c.Timezone = cmp.Or(c.Timezone, TimezoneDefault)
	c.DrainThreshold = cmp.Or(c.DrainThreshold, DrainThresholdDefault)
	c.CompletionWindow = cmp.Or(c.CompletionWindow, CompletionWindowDefault)
	c.DeadlineMargin = cmp.Or(c.DeadlineMargin, DeadlineMarginDefault)
	c.PullBackBefore = cmp.Or(c.PullBackBefore, PullBackBeforeDefault)
	c.FlushInterval = cmp.Or(c.FlushInterval, FlushIntervalDefault)
	c.MaxLines = cmp.Or(c.MaxLines, MaxLinesDefault)
	c.MaxBytes = cmp.Or(c.MaxBytes, MaxBytesDefault)
	c.PollInterval = cmp.Or(c.PollInterval, PollIntervalDefault)
	c.FailedLines = cmp.Or(c.FailedLines, FailedLinesDeadLetter)
	c.ReconcilePages = cmp.Or(c.ReconcilePages, ReconcilePagesDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	return c
}

// validate checks c (after WithDefaults); full also requires what the
// collector and poller need.
func (c Config) validate(full bool) error {
	var errs []error
	if full {
		if c.Store == nil {
			errs = append(errs, errors.New("batchapi: Config.Store is required"))
		}
		if c.Client == nil {
			errs = append(errs, errors.New("batchapi: Config.Client is required"))
		}
	}
	if _, err := ParseWindow(c.Window, c.Timezone); err != nil {
		errs = append(errs, fmt.Errorf("batchapi: Config.Window/Timezone: %w", err))
	}
	if c.DrainThreshold < -1 {
		errs = append(errs, fmt.Errorf("batchapi: Config.DrainThreshold must be positive or -1; got %v", c.DrainThreshold))
	}
	if c.CompletionWindow < 0 {
		errs = append(errs, fmt.Errorf("batchapi: Config.CompletionWindow must be positive; got %v", c.CompletionWindow))
	}
	if c.DeadlineMargin < -1 {
		errs = append(errs, fmt.Errorf("batchapi: Config.DeadlineMargin must be positive or -1; got %v", c.DeadlineMargin))
	}
	if c.PullBackBefore < 0 || c.PullBackBefore >= c.minDeadlineLead() {
		errs = append(errs, fmt.Errorf("batchapi: Config.PullBackBefore must be in [0, CompletionWindow+DeadlineMargin); got %v", c.PullBackBefore))
	}
	if c.FlushInterval < 0 {
		errs = append(errs, fmt.Errorf("batchapi: Config.FlushInterval must be positive; got %v", c.FlushInterval))
	}
	if c.MaxLines < 1 || c.MaxLines > MaxLinesDefault {
		errs = append(errs, fmt.Errorf("batchapi: Config.MaxLines must be in 1..%d; got %d", MaxLinesDefault, c.MaxLines))
	}
	if c.MaxBytes < 1 || c.MaxBytes > MaxBytesDefault {
		errs = append(errs, fmt.Errorf("batchapi: Config.MaxBytes must be in 1..%d; got %d", MaxBytesDefault, c.MaxBytes))
	}
	if c.PollInterval < 0 {
		errs = append(errs, fmt.Errorf("batchapi: Config.PollInterval must be positive; got %v", c.PollInterval))
	}
	if c.FailedLines != FailedLinesDeadLetter && c.FailedLines != FailedLinesLive {
		errs = append(errs, fmt.Errorf("batchapi: Config.FailedLines: unknown policy %q (want dead_letter or live)", c.FailedLines))
	}
	for m, p := range c.Catalog.Models {
		if p.InputPricePer1M < 0 || p.OutputPricePer1M < 0 || p.BatchDiscount < 0 || p.BatchDiscount > 1 {
			errs = append(errs, fmt.Errorf("batchapi: Config.Catalog.Models[%q]: prices must not be negative and BatchDiscount in [0, 1]", m))
		}
	}
	return errors.Join(errs...)
}

func (c Config) minDeadlineLead() time.Duration {
	return c.CompletionWindow + max(c.DeadlineMargin, 0)
}

// policy builds the routing policy of a validated c.
func (c Config) policy() Policy {
	w, _ := ParseWindow(c.Window, c.Timezone)
	return Policy{Window: w, DrainThreshold: max(c.DrainThreshold, 0), MinDeadlineLead: c.minDeadlineLead()}
}

// cost returns the batch and live price of a call.
func (c Config) cost(model string, prompt, completion int) (batch, live float64) {
	m := c.Catalog.Lookup(model)
	return m.BatchCost(prompt, completion), m.Cost(prompt, completion)
}
