package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
)

// Producer publishes jobs through the outbox. It is safe for concurrent
// use.
type Producer struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	probeMu   sync.Mutex // one measurement at a time
	mu        sync.Mutex // guards the cache below
	cached    QueueState
	cachedErr error
	expires   time.Time
}

// Receipt says what happened to one job.
type Receipt struct {
	// ID and Tenant identify the job.
	ID     string
	Tenant string
	// Status is the job's status: queued for a new job, the stored status
	// when the id already existed.
	Status llmq.Status
	// Created is false when a job with this id already existed for the
	// same tenant (nothing was done: publishing is idempotent by id).
	Created bool
	// Conflict is true when the id belongs to another tenant's job; nothing
	// was done for this job.
	Conflict bool
	// Published is true once the broker confirmed the message (false for
	// a job that was not created, and when ErrUnpublished is returned).
	Published bool
}

// New returns a Producer.
func New(cfg Config) (*Producer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Producer{cfg: cfg, log: cfg.Logger, metrics: m}, nil
}

// Publish is PublishBatch of one job.
func (p *Producer) Publish(ctx context.Context, job *llmq.Job) (Receipt, QueueState, error) {
	rs, q, err := p.PublishBatch(ctx, []*llmq.Job{job})
	if len(rs) == 1 {
		return rs[0], q, err
	}
	var je *JobError
	if errors.As(err, &je) {
		err = fmt.Errorf("producer: job %q: %w", je.ID, je.Err)
	}
	return Receipt{}, q, err
}

// PublishBatch validates, admits, records and publishes jobs (at most
// MaxBatch); it fills in their ids, tenants and priorities. The queue state
// used for admission is returned with the receipts.
//
// Errors, in the order they are checked (nothing is recorded for the first
// four): ErrTooManyJobs; a *JobError wrapping the job's
// *llmq.ValidationError; ErrBrokerUnavailable or ErrDatabaseUnavailable
// (the queue could not be measured); *ErrBackpressure (queue full, or a
// deadline the estimated wait passes). Then the jobs are recorded in one
// transaction (ErrDatabaseUnavailable, or store.ErrInvalidJob for data
// Postgres refuses: nothing recorded) and published: when the publish
// fails, ErrUnpublished is returned with the receipts, the jobs stay queued
// and the outbox sweeper publishes them later.
func (p *Producer) PublishBatch(ctx context.Context, jobs []*llmq.Job) ([]Receipt, QueueState, error) {
	if len(jobs) > p.cfg.MaxBatch {
		return nil, QueueState{}, fmt.Errorf("%w: %d (at most %d)", ErrTooManyJobs, len(jobs), p.cfg.MaxBatch)
	}
	for i, j := range jobs {
		if err := j.Normalize(); err != nil {
			return nil, QueueState{}, &JobError{Index: i, ID: j.ID, Err: err}
		}
		if err := j.Validate(); err != nil {
			return nil, QueueState{}, &JobError{Index: i, ID: j.ID, Err: err}
		}
	}
	q, err := p.Queue(ctx)
	if err != nil {
		p.metrics.jobs.WithLabelValues("broker_unavailable").Add(float64(len(jobs)))
		return nil, q, err
	}
	if err := p.admit(q, jobs); err != nil {
		p.metrics.jobs.WithLabelValues("rejected_" + err.Reason).Add(float64(len(jobs)))
		return nil, q, err
	}
	created, err := p.cfg.Store.InsertOutbox(ctx, jobs)
	switch {
	case errors.Is(err, store.ErrInvalidJob):
		return nil, q, fmt.Errorf("producer: record jobs: %w", err)
	case err != nil:
		return nil, q, fmt.Errorf("%w: record jobs: %w", ErrDatabaseUnavailable, err)
	}
	rs := make([]Receipt, len(jobs))
	var fresh []*llmq.Job
	for i, j := range jobs {
		rs[i] = Receipt{ID: j.ID, Tenant: j.Tenant, Status: llmq.StatusQueued, Created: created[i]}
		if created[i] {
			fresh = append(fresh, j)
			continue
		}
		rec, err := p.cfg.Store.GetByID(ctx, j.ID)
		switch {
		case err != nil:
			return nil, q, fmt.Errorf("%w: read existing job %q: %w", ErrDatabaseUnavailable, j.ID, err)
		case rec.Tenant != j.Tenant:
			rs[i].Conflict, rs[i].Status = true, ""
		default:
			rs[i].Status = rec.Status
		}
	}
	p.metrics.jobs.WithLabelValues("duplicate").Add(float64(len(jobs) - len(fresh)))
	if err := p.publish(ctx, fresh); err != nil && !errors.Is(err, errNotMarked) {
		p.metrics.jobs.WithLabelValues("unpublished").Add(float64(len(fresh)))
		return rs, q, fmt.Errorf("%w: %w", ErrUnpublished, err)
	}
	p.metrics.jobs.WithLabelValues("published").Add(float64(len(fresh)))
	for i := range rs {
		rs[i].Published = rs[i].Created
	}
	return rs, q, nil
}

// admit refuses jobs when the queue is full or a deadline cannot be met.
func (p *Producer) admit(q QueueState, jobs []*llmq.Job) *ErrBackpressure {
	if q.State == StateRejecting {
		wait, known := q.waitFor(q.Depth - p.cfg.SoftDepth)
		return &ErrBackpressure{Reason: ReasonQueueFull, RetryAfter: retryHint(wait, known), Queue: q, Index: -1}
	}
	if !q.DrainKnown {
		return nil
	}
	now := p.cfg.Clock.Now()
	for i, j := range jobs {
		if j.Deadline == nil {
			continue
		}
		left := j.Deadline.Sub(now)
		if q.EstimatedDrain > left {
			return &ErrBackpressure{Reason: ReasonDeadline, RetryAfter: retryHint(q.EstimatedDrain-max(left, 0), true),
				Queue: q, Index: i, JobID: j.ID}
		}
	}
	return nil
}

// priority maps a job priority to the RabbitMQ message priority.
func priority(p llmq.Priority) uint8 {
	switch p {
	case llmq.PriorityHigh:
		return 9
	case llmq.PriorityLow:
		return 1
	}
	return 5
}

// Message is the broker message of j: key = tenant, value = the job's JSON,
// priority high 9 / normal 5 / low 1.
func Message(j *llmq.Job) (transport.Message, error) {
	v, err := j.Encode()
	if err != nil {
		return transport.Message{}, err
	}
	return transport.Message{Key: []byte(j.Tenant), Value: v, Priority: priority(j.Priority)}, nil
}

// publish sends jobs (already recorded) and marks them published. It runs
// on after ctx is cancelled, bounded by PublishTimeout: the rows exist, and
// finishing now spares the sweeper a republish.
func (p *Producer) publish(ctx context.Context, jobs []*llmq.Job) error {
	if len(jobs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.PublishTimeout)
	defer cancel()
	msgs := make([]transport.Message, len(jobs))
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		m, err := Message(j)
		if err != nil {
			return err
		}
		msgs[i], ids[i] = m, j.ID
	}
	start := p.cfg.Clock.Now()
	if err := p.cfg.Publisher.Publish(ctx, p.cfg.Destination, msgs...); err != nil {
		p.invalidate()
		p.log.Warn("publish failed; the outbox sweeper will republish", slog.Int("jobs", len(jobs)),
			slog.String("destination", p.cfg.Destination), slog.String("error", err.Error()))
		return err
	}
	p.metrics.publishSeconds.Observe(p.cfg.Clock.Since(start).Seconds())
	if err := p.cfg.Store.MarkPublished(ctx, ids); err != nil {
		// The messages are on the broker; the sweeper will send them once
		// more, which the workers' idempotent claim absorbs.
		p.log.Warn("mark published failed", slog.Int("jobs", len(jobs)), slog.String("error", err.Error()))
		return fmt.Errorf("%w: %w", errNotMarked, err)
	}
	return nil
}

// errNotMarked: the publish was confirmed but published_at could not be
// set. The jobs are on the broker.
var errNotMarked = errors.New("producer: published but not marked")

// Sweep republishes the queued jobs recorded more than grace ago whose
// publish was never confirmed, limit per round trip, and returns how many
// it published.
func (p *Producer) Sweep(ctx context.Context, grace time.Duration, limit int) (int, error) {
	total := 0
	for {
		recs, err := p.cfg.Store.Unpublished(ctx, p.cfg.Clock.Now().Add(-grace), limit)
		if err != nil {
			return total, fmt.Errorf("producer: sweep: %w", err)
		}
		if len(recs) == 0 {
			return total, nil
		}
		jobs := make([]*llmq.Job, len(recs))
		for i, r := range recs {
			jobs[i] = r.Job()
		}
		if err := p.publish(ctx, jobs); err != nil {
			return total, fmt.Errorf("producer: sweep: %w", err)
		}
		total += len(jobs)
		p.metrics.republished.Add(float64(len(jobs)))
		if len(recs) < limit {
			return total, nil
		}
	}
}
