package dlq

import "time"

// Reason is the class of cause for which a job was dead-lettered. Alerts are
// grouped by reason and tenant.
type Reason string

const (
	// ReasonPoison: the message could not be decoded or failed validation;
	// it is never retried.
	ReasonPoison Reason = "poison"
	// ReasonRetriesExhausted: every attempt (and fallback) failed with a
	// retryable error such as 429 or 5xx.
	ReasonRetriesExhausted Reason = "retries_exhausted"
	// ReasonPermanentError: the upstream answered with an error retrying
	// cannot fix (400, 401, 404, insufficient_quota).
	ReasonPermanentError Reason = "permanent_error"
	// ReasonExpired: the job's deadline passed before it started.
	ReasonExpired Reason = "expired"
	// ReasonDeliveryLimit: the broker gave up delivering the message after
	// its queue's delivery limit (it kept failing to be recorded).
	ReasonDeliveryLimit Reason = "delivery_limit"
	// ReasonModelNotAllowed: the job names a model (body.model or a
	// fallback) the model catalog does not allow (llmq.Catalog.Allows); it
	// is never called.
	ReasonModelNotAllowed Reason = "model_not_allowed"
	// ReasonUnknownProject: the job names a project its tenant does not
	// list (llmq.Tenants.CheckProject); it is never called.
	ReasonUnknownProject Reason = "unknown_project"
	// ReasonBudgetExceeded: a budget of the job's tenant or project is
	// spent and its overage policy is reject (docs/design/tenants.md).
	ReasonBudgetExceeded Reason = "budget_exceeded"
	// ReasonTenantQueueFull: the job's tenant held its cap of jobs queued
	// or in flight when its message was ingested (worker.Config.TenantCap,
	// docs/design/admission.md); replay it once the tenant's backlog is
	// down.
	ReasonTenantQueueFull Reason = "tenant_queue_full"
	// ReasonUnknown stands in for an event that names no reason.
	ReasonUnknown Reason = "unknown"
)

// unrecorded reports a reason of a message that never became a job: its
// job id is only what the message claims, so its letter is keyed by the
// message's bytes and leaves any job of that id alone.
func (r Reason) unrecorded() bool { return r == ReasonPoison || r == ReasonDeliveryLimit }

// Reasons are the reasons a letter can be recorded with, the values the
// reason filters accept.
var Reasons = []Reason{ReasonPoison, ReasonRetriesExhausted, ReasonPermanentError, ReasonExpired,
	ReasonDeliveryLimit, ReasonModelNotAllowed, ReasonBudgetExceeded, ReasonUnknownProject, ReasonTenantQueueFull}

// Event is one dead-lettered job, as reported to an [Alerter].
type Event struct {
	// JobID is the dead-lettered job's id.
	JobID string
	// Tenant owns the job; empty means llmq.DefaultTenant.
	Tenant string
	// Reason classifies the cause; empty means ReasonUnknown.
	Reason Reason
	// LastError is the last error the job met, as shown to a person. It is
	// cut to 500 bytes in notifications.
	LastError string
	// Model is the model of the last attempt; may be empty.
	Model string
	// Time is when the job was dead-lettered; zero means when Notify was
	// called. It is shown in notifications; grouping uses the alerter's
	// clock at Notify, so that events stamped by other clocks cannot open or
	// close a burst early.
	Time time.Time
}
