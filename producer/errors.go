package producer

import (
	"errors"
	"fmt"
	"time"

	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/store"
)

var (
	// ErrBrokerUnavailable: the depth probe could not reach the broker, so
	// nothing was recorded or published. Retry later.
	ErrBrokerUnavailable = errors.New("producer: broker unavailable")
	// ErrUnpublished: the jobs are recorded as queued in Postgres but the
	// broker did not confirm their publish; the outbox sweeper publishes
	// them once the broker is back. They are accepted: do not resubmit.
	ErrUnpublished = errors.New("producer: jobs recorded but not yet published (the outbox sweeper will publish them)")
	// ErrDatabaseUnavailable: Postgres failed while the queue was measured
	// or the jobs recorded; nothing was recorded. Retry later.
	ErrDatabaseUnavailable = errors.New("producer: database unavailable")
	// ErrTooManyJobs: a batch larger than Config.MaxBatch.
	ErrTooManyJobs = errors.New("producer: too many jobs in one batch")
	// ErrUnpublishable: Sweep met a recorded job the broker refuses (or
	// that is over the size limit) and Config.DeadLetters is nil; the job
	// stays queued and unpublished.
	ErrUnpublishable = errors.New("producer: job cannot be published")
)

// ReasonUnpublishable is the dead-letter reason of a recorded job that the
// outbox cannot publish: its message is over the size limit or the broker
// refuses it (transport.ErrMessageRejected).
const ReasonUnpublishable dlq.Reason = "unpublishable"

// Backpressure reasons.
const (
	// ReasonQueueFull: the queue depth reached HardDepth.
	ReasonQueueFull = "queue_full"
	// ReasonDeadline: the estimated wait passes the job's deadline.
	ReasonDeadline = "deadline"
	// ReasonTenantQueueFull: the jobs' tenant holds its hard share of the
	// queue (TenantQueue.HardShare); the other tenants are admitted.
	ReasonTenantQueueFull = "tenant_queue_full"
)

// ErrBackpressure is returned (as *ErrBackpressure) when jobs are refused
// because of the queue's backpressure. Nothing was recorded or published.
type ErrBackpressure struct {
	// Reason is ReasonQueueFull, ReasonTenantQueueFull or ReasonDeadline.
	Reason string
	// RetryAfter is how long to wait before trying again: the time the
	// queue needs to drain to SoftDepth (queue full), the tenant's jobs to
	// drain to its soft share (tenant queue full), or to shrink by the
	// wait beyond the deadline (deadline), at the measured completion rate;
	// RetryAfterDefault when no completion was measured.
	RetryAfter time.Duration
	// Queue is the state that refused the jobs.
	Queue QueueState
	// Index is the refused job's position in the batch (deadline, and a
	// project's tenant_queue_full; -1 for the whole batch).
	Index int
	// JobID is the refused job's id (deadline only).
	JobID string
	// Tenant is the refused tenant (tenant_queue_full only).
	Tenant string
	// Project, when set, is the refused project of Tenant, which holds
	// ProjectDepth jobs, at its hard depth; Index is its first job.
	Project      string
	ProjectDepth int64
	// Prediction is the refused job's predicted completion (deadline,
	// with Config.Predict).
	Prediction *store.Prediction
}

func (e *ErrBackpressure) Error() string {
	if e.Reason == ReasonDeadline && e.Prediction != nil {
		return fmt.Sprintf("producer: job %q: predicted completion in %s (%d jobs ahead, %d in flight) passes its deadline; retry after %s",
			e.JobID, e.Prediction.Wait.Round(time.Second), e.Prediction.Ahead, e.Prediction.InFlight, e.RetryAfter)
	}
	if e.Reason == ReasonDeadline {
		return fmt.Sprintf("producer: job %q: estimated wait %s passes its deadline; retry after %s",
			e.JobID, e.Queue.EstimatedDrain.Round(time.Second), e.RetryAfter)
	}
	if e.Reason == ReasonTenantQueueFull && e.Project != "" {
		return fmt.Sprintf("producer: project %q of tenant %q holds %d jobs, its hard depth; retry after %s",
			e.Project, e.Tenant, e.ProjectDepth, e.RetryAfter)
	}
	if e.Reason == ReasonTenantQueueFull {
		return fmt.Sprintf("producer: tenant %q holds %d jobs, its share of the queue; retry after %s",
			e.Tenant, e.Queue.Tenant.Depth, e.RetryAfter)
	}
	return fmt.Sprintf("producer: queue depth %d reached the hard limit; retry after %s", e.Queue.Depth, e.RetryAfter)
}

// JobError is a problem with one job of a batch: a *llmq.ValidationError,
// or a *llmq.TooLargeError when its encoded message is over the limit.
type JobError struct {
	// Index is the job's position in the batch.
	Index int
	// ID is the job's id ("" when it had none yet).
	ID  string
	Err error
}

func (e *JobError) Error() string {
	return fmt.Sprintf("producer: job %d (%q): %v", e.Index, e.ID, e.Err)
}

func (e *JobError) Unwrap() error { return e.Err }
