// Package api is llmq's HTTP API (`llmq api`): enqueue jobs, poll their
// status, cancel them, read the queue's backpressure, the jobs by status,
// the dead letters (by reason; replay and purge) and the provider batches,
// health and readiness. The web console (internal/app/console) renders
// these endpoints and nothing else. The contract is the OpenAPI 3 document openapi.yaml, embedded
// and served at GET /openapi.yaml; a test checks the running server against
// it.
//
// # Authentication and tenants
//
// Every /v1 endpoint needs Authorization: Bearer <key>; each key is bound to
// one tenant (LLMQ_API_KEYS=key1:tenantA,... or api_keys in the config
// file). A request acts for its key's tenant only: another tenant's job
// answers 404, exactly like a missing one. A posted job belongs to the key's
// tenant: a body "tenant" that names another tenant is refused with 400
// (field "tenant", code tenant_mismatch); an absent tenant, or the key's own,
// is accepted.
//
// Operator keys (Config.OperatorKeys) are bound to no tenant: they see every
// tenant's jobs and dead letters and act on them, and alone see the
// provider batches (a batch holds several tenants' jobs: 403 for a tenant
// key). The tenant query parameter, on any /v1 endpoint, narrows an
// operator's request to one tenant, and is required on the endpoints of one
// job (ids are scoped by tenant); a tenant key may send only its own. GET
// /v1/me says which kind a key is.
//
// # Limits at the door
//
// Every authenticated request takes a token of its key's and its tenant's
// requests per minute (Config.RateLimits; ratelimit.go) or of neither:
// past either it answers 429 rate_limit_exceeded with Retry-After, the
// message naming the limit. A client address (the trusted proxy's header,
// else the peer) past its failed authentications is refused the same way
// before its key is looked at. A gateway tenant's waiting calls and a
// call's deadline are bounded (GatewayConfig.MaxWaiting, MaxDeadline).
//
// # Enqueueing and what 202 means
//
// POST /v1/jobs takes one job or {"jobs": [...]} (1 to 1,000 jobs, all or
// none). Before anything is recorded the queue is measured: a broker that
// cannot be measured answers 503 broker_unavailable; a tenant holding its
// hard share of the queue answers 429 tenant_queue_full (the other tenants
// are accepted), the whole queue at its hard threshold 429 queue_full; a
// job whose deadline falls before the tenant's estimated drain time (depth
// / completion rate) answers 429 deadline_unreachable at once. The 429s
// carry Retry-After (seconds), and every answer the tenant's own figures
// (X-Llmq-Backpressure, -Queue-Depth, -Queue-Share, -Estimated-Wait;
// docs/design/admission.md).
// Otherwise the jobs are inserted as queued in Postgres (one transaction)
// and published. 202 means the jobs are durably recorded: "published": true
// when the broker confirmed them, false when the publish failed after the
// insert — the jobs are then kept queued and the outbox sweeper (run by
// llmq api) publishes them once the broker is back; they must not be sent
// again. Polling works from the 202 on. Job ids are scoped by tenant: each
// tenant has its own. Re-posting a job id the tenant already has changes
// nothing and answers 202 with the job's current status ("created": false).
//
// The body is read as a stream: reading stops at the 1,001st job, at any
// value larger than a job may be (max_message_bytes), and at a key, string
// or nesting past internal/jsonlimit's bounds, checked byte by byte before
// the decoder buffers them, so a hostile body costs no more memory than
// the jobs it may carry. A job that names a model
// the configuration does not allow (body.model or a fallback) is refused
// with 400 model_not_allowed; a job naming a project its tenant does not
// list (when it lists some), with 400 unknown_project; a job of a tenant or
// project whose budget is spent and whose overage policy is reject, with
// 402 budget_exceeded (budget.go).
//
// Errors are {"error": {"code", "message", "field"}} (field names the JSON
// path of the first failing field; "details" lists them all): 400 bad input,
// 401 missing or unknown key, 404, 405, 409, 413 body over the limit, 415
// content type not application/json, 429, 503. A path or a query holding
// bytes no id or cursor can hold (invalid UTF-8, NUL) is 400 or 404, never a
// server error. Every answer carries Cache-Control: no-store and
// X-Content-Type-Options: nosniff; lists use one envelope, {"data": [...],
// "next_cursor": ...}; a job's error is sanitised and bounded (redact.Text).
package api
