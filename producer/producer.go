package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/tracing"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
)

// Producer publishes jobs through the outbox. It is safe for concurrent
// use.
type Producer struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	group   *grouper

	probeMu   sync.Mutex // one measurement at a time
	mu        sync.Mutex // guards the cache below and unconsumedSince
	cached    QueueState
	cachedErr error
	expires   time.Time
	// unconsumedSince is when jobs were first measured waiting with no
	// worker consuming; zero when they were not at the last measure.
	unconsumedSince time.Time
	// refreshed is closed when the goroutine of admission measuring the
	// queue ends; nil when none runs.
	refreshed chan struct{}
	// table is the tenants' part of the last measurement; recorded counts
	// the jobs recorded per tenant since.
	table            *tenantTable
	recorded         map[string]int64
	recordedProjects map[store.ScopeRef]int64
}

// Receipt says what happened to one job.
type Receipt struct {
	// ID and Tenant identify the job.
	ID     string
	Tenant string
	// Status is the job's status: queued for a new job, the stored status
	// when the id already existed, "" when the id's job finished and was
	// pruned (store.Retention).
	Status llmq.Status
	// Created is false when the tenant already had a job with this id
	// (nothing was done: publishing is idempotent by tenant and id).
	Created bool
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
	return &Producer{cfg: cfg, log: cfg.Logger, metrics: m, group: newGrouper(), recorded: map[string]int64{},
		recordedProjects: map[store.ScopeRef]int64{}}, nil
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

// route gives j, when it names no route, its tenant's (TenantReplies),
// else the deployment's results topic (ResultsTopic).
func (p *Producer) route(j *llmq.Job) {
	if !j.ReplyTo.Empty() {
		return
	}
	if p.cfg.TenantReplies != nil {
		if r, ok := p.cfg.TenantReplies(j.Tenant); ok && !r.Empty() {
			j.ReplyTo = &llmq.Reply{To: r.To, Webhook: r.Webhook}
			return
		}
	}
	if p.cfg.ResultsTopic != "" {
		j.ReplyTo = &llmq.Reply{To: p.cfg.ResultsTopic}
	}
}

// PublishBatch validates, admits, records and publishes jobs (at most
// MaxBatch), filling in their ids, tenants and priorities, and returns the
// receipts and the queue state admission used. Nothing is recorded on an
// error, except ErrUnpublished: the jobs stay queued for the outbox sweeper.
// The errors and the order of the checks: producer/doc.go and
// docs/design/admission.md#publishbatch.
func (p *Producer) PublishBatch(ctx context.Context, jobs []*llmq.Job) ([]Receipt, QueueState, error) {
	if !tracing.Enabled() {
		return p.publishBatch(ctx, jobs)
	}
	ctx, span := tracing.StartPublish(ctx, p.cfg.Destination, len(jobs))
	tc := tracing.Encode(ctx)
	for _, j := range jobs {
		if j.TraceContext == "" {
			j.TraceContext = tc
		}
	}
	rs, q, err := p.publishBatch(ctx, jobs)
	tracing.EndErr(span, err)
	return rs, q, err
}

func (p *Producer) publishBatch(ctx context.Context, jobs []*llmq.Job) ([]Receipt, QueueState, error) {
	if len(jobs) > p.cfg.MaxBatch {
		return nil, QueueState{}, fmt.Errorf("%w: %d (at most %d)", ErrTooManyJobs, len(jobs), p.cfg.MaxBatch)
	}
	for i, j := range jobs {
		if j.Validated() {
			continue // as llmq.Decode returned it: complete and valid
		}
		if err := j.Normalize(); err != nil {
			return nil, QueueState{}, &JobError{Index: i, ID: j.ID, Err: err}
		}
		if err := j.Validate(); err != nil {
			return nil, QueueState{}, &JobError{Index: i, ID: j.ID, Err: err}
		}
	}
	msgs := make([]transport.Message, len(jobs))
	for i, j := range jobs {
		p.route(j)
		m, err := p.message(j)
		if err != nil {
			p.metrics.jobs.WithLabelValues("too_large").Add(float64(len(jobs)))
			return nil, QueueState{}, &JobError{Index: i, ID: j.ID, Err: err}
		}
		msgs[i] = m
	}
	q, err := p.admission(ctx)
	if err != nil {
		p.metrics.jobs.WithLabelValues("broker_unavailable").Add(float64(len(jobs)))
		return nil, q, err
	}
	q, bp := p.admitTenants(q, jobs)
	if bp == nil {
		bp = p.admit(ctx, q, jobs)
	}
	if bp != nil {
		p.metrics.jobs.WithLabelValues("rejected_" + bp.Reason).Add(float64(len(jobs)))
		return nil, q, bp
	}
	// Once the rows are committed the jobs are accepted, whatever happens
	// to the publish: the existing jobs' statuses come back with the
	// insert, so nothing is left to read (and fail) after the commit.
	res := p.record(ctx, jobs, msgs)
	recorded, err := res.recorded, res.recordErr
	switch {
	case errors.Is(err, store.ErrInvalidJob):
		return nil, q, fmt.Errorf("producer: record jobs: %w", err)
	case err != nil:
		return nil, q, fmt.Errorf("%w: record jobs: %w", ErrDatabaseUnavailable, err)
	}
	rs := make([]Receipt, len(jobs))
	fresh := 0
	for i, j := range jobs {
		rs[i] = Receipt{ID: j.ID, Tenant: j.Tenant, Status: recorded[i].Status, Created: recorded[i].Created}
		if recorded[i].Created {
			fresh++
			p.countRecorded(j)
		}
	}
	p.metrics.jobs.WithLabelValues("duplicate").Add(float64(len(jobs) - fresh))
	if err := res.publishErr; err != nil && !errors.Is(err, errNotMarked) {
		p.metrics.jobs.WithLabelValues("unpublished").Add(float64(fresh))
		return rs, q, fmt.Errorf("%w: %w", ErrUnpublished, err)
	}
	p.metrics.jobs.WithLabelValues("published").Add(float64(fresh))
	for i := range rs {
		rs[i].Published = rs[i].Created
	}
	return rs, q, nil
}

// admit refuses jobs when the queue is full or a deadline cannot be met
// (at the drain estimate of q's tenant when it has one: its jobs are
// claimed by fair share, not behind every other tenant's).
func (p *Producer) admit(ctx context.Context, q QueueState, jobs []*llmq.Job) *ErrBackpressure {
	if q.State == StateRejecting {
		wait, known := q.waitFor(q.Depth - p.cfg.SoftDepth)
		return &ErrBackpressure{Reason: ReasonQueueFull, RetryAfter: retryHint(wait, known), Queue: q, Index: -1}
	}
	if p.cfg.Predict != nil {
		return p.admitPredicted(ctx, q, jobs)
	}
	_, drain, known, _ := q.Own()
	if !known {
		return nil
	}
	now := p.cfg.Clock.Now()
	for i, j := range jobs {
		if j.Deadline == nil {
			continue
		}
		left := j.Deadline.Sub(now)
		if drain > left {
			return &ErrBackpressure{Reason: ReasonDeadline, RetryAfter: retryHint(drain-max(left, 0), true),
				Queue: q, Index: i, JobID: j.ID}
		}
	}
	return nil
}

// admitPredicted refuses the first job with a deadline whose predicted
// completion (Config.Predict) passes it; an unknown prediction admits.
func (p *Producer) admitPredicted(ctx context.Context, q QueueState, jobs []*llmq.Job) *ErrBackpressure {
	for i, j := range jobs {
		if j.Deadline == nil {
			continue
		}
		pr, err := p.cfg.Predict(ctx, j)
		if err != nil {
			p.log.Warn("predict a job's completion; admitted", slog.String("job_id", j.ID), slog.String("error", err.Error()))
			continue
		}
		left := j.Deadline.Sub(p.cfg.Clock.Now())
		if pr.Known && pr.Wait > left {
			return &ErrBackpressure{Reason: ReasonDeadline, RetryAfter: retryHint(pr.Wait-max(left, 0), true),
				Queue: q, Index: i, JobID: j.ID, Prediction: &pr}
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

// Message is the broker message of j: key = its id or tenant (key), value =
// its wire form (llmq.Job.Encode), priority high 9 / normal 5 / low 1,
// headers its trace context (traceparent, tracestate) when it has one.
func Message(j *llmq.Job, key KeyBy) (transport.Message, error) {
	v, err := j.Encode()
	if err != nil {
		return transport.Message{}, err
	}
	k := j.ID
	if key == KeyByTenant {
		k = j.Tenant
	}
	return transport.Message{Key: []byte(k), Value: v, Priority: priority(j.Priority),
		Headers: tracing.SetHeaders(nil, j.TraceContext)}, nil
}

// message is the broker message of j, or a *llmq.TooLargeError when its
// value is over MaxMessageBytes or over what the broker takes.
func (p *Producer) message(j *llmq.Job) (transport.Message, error) {
	m, err := Message(j, p.cfg.KeyBy)
	if err != nil {
		return transport.Message{}, err
	}
	limit := p.cfg.MaxMessageBytes
	if sl, ok := p.cfg.Publisher.(transport.SizeLimiter); ok {
		if broker := max(sl.MaxValueBytes(m), 1); limit < 0 || broker < limit {
			limit = broker
		}
	}
	if err := llmq.CheckSize(m.Value, limit); err != nil {
		return transport.Message{}, err
	}
	return m, nil
}

// publish sends msgs (of jobs recorded unpublished, keys in the same
// order) and marks them published: the sweeper's path.
func (p *Producer) publish(ctx context.Context, msgs []transport.Message, keys []store.Key) error {
	if len(msgs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.PublishTimeout)
	defer cancel()
	if err := p.send(ctx, msgs); err != nil {
		return err
	}
	if err := p.cfg.Store.MarkPublished(ctx, keys); err != nil {
		// The messages are on the broker; the sweeper will send them once
		// more, which the workers' idempotent claim absorbs.
		p.log.Warn("mark published failed", slog.Int("jobs", len(msgs)), slog.String("error", err.Error()))
		return fmt.Errorf("%w: %w", errNotMarked, err)
	}
	return nil
}

// send publishes msgs and awaits the broker's confirms. It runs on after
// ctx is cancelled, bounded by PublishTimeout: the rows exist (or their
// transaction waits on it), and finishing now spares the sweeper a
// republish.
func (p *Producer) send(ctx context.Context, msgs []transport.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.PublishTimeout)
	defer cancel()
	start := p.cfg.Clock.Now()
	if err := p.cfg.Publisher.Publish(ctx, p.cfg.Destination, msgs...); err != nil {
		p.invalidate()
		p.log.Warn("publish failed; the outbox sweeper will republish", slog.Int("jobs", len(msgs)),
			slog.String("destination", p.cfg.Destination), slog.String("error", err.Error()))
		return err
	}
	p.metrics.publishSeconds.Observe(p.cfg.Clock.Since(start).Seconds())
	return nil
}

// errNotMarked: the publish was confirmed but published_at could not be
// set. The jobs are on the broker.
var errNotMarked = errors.New("producer: published but not marked")

// Sweep republishes the queued jobs recorded more than grace ago whose
// publish was never confirmed, limit per round trip, and returns how many
// it published. A job the broker refuses for itself (over the size limit,
// or transport.ErrMessageRejected) is handed to Config.DeadLetters with
// reason ReasonUnpublishable and the sweep goes on; when a batch is
// refused, its jobs are published one by one to find the refused ones.
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
		jobs := make([]*llmq.Job, 0, len(recs))
		msgs := make([]transport.Message, 0, len(recs))
		keys := make([]store.Key, 0, len(recs))
		for _, r := range recs {
			j := r.Job()
			m, err := p.message(j)
			if err != nil {
				if err := p.deadLetter(ctx, j, transport.Message{}, err); err != nil {
					return total, err
				}
				continue
			}
			jobs, msgs, keys = append(jobs, j), append(msgs, m), append(keys, r.Key())
		}
		n, err := p.republish(ctx, jobs, msgs, keys)
		total += n
		if err != nil {
			return total, err
		}
		if len(recs) < limit {
			return total, nil
		}
	}
}

// republish publishes the sweep's messages together, or one by one when the
// broker refused the batch, dead-lettering each one it refuses alone. It
// returns how many were published.
func (p *Producer) republish(ctx context.Context, jobs []*llmq.Job, msgs []transport.Message, keys []store.Key) (int, error) {
	err := p.publish(ctx, msgs, keys)
	switch {
	case err == nil || errors.Is(err, errNotMarked):
		p.metrics.republished.Add(float64(len(msgs)))
		return len(msgs), nil
	case !errors.Is(err, transport.ErrMessageRejected):
		return 0, fmt.Errorf("producer: sweep: %w", err)
	case len(msgs) == 1:
		return 0, p.deadLetter(ctx, jobs[0], msgs[0], err)
	}
	n := 0
	for i := range msgs {
		k, err := p.republish(ctx, jobs[i:i+1], msgs[i:i+1], keys[i:i+1])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// deadLetter hands a job that cannot be published to Config.DeadLetters.
// The letter carries no message: the broker would refuse it on the
// dead-letter topic too, and the job keeps its body in the jobs table.
func (p *Producer) deadLetter(ctx context.Context, j *llmq.Job, m transport.Message, cause error) error {
	if p.cfg.DeadLetters == nil {
		return fmt.Errorf("producer: sweep: job %q: %w: %w", j.ID, ErrUnpublishable, cause)
	}
	err := p.cfg.DeadLetters.DeadLetter(ctx, dlq.Letter{
		JobID: j.ID, Tenant: j.Tenant, Reason: ReasonUnpublishable, LastError: cause.Error(),
		Model: j.Model(), Key: m.Key, Source: "outbox",
	})
	if err != nil {
		return fmt.Errorf("producer: sweep: dead-letter job %q: %w", j.ID, err)
	}
	p.metrics.deadLettered.Inc()
	p.log.Error("outbox job cannot be published; dead-lettered", slog.String("job_id", j.ID),
		slog.String("tenant", j.Tenant), slog.String("error", cause.Error()))
	return nil
}
