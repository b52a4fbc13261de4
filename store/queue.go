package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/llmq/llmq"
)

// Queue is the jobs and their claims: jobs recorded (Ingest), claimed in one
// order, held under a renewed, fenced lease, ended by their holder's
// writes, reaped when the holder dies; with the queue's figures and what
// the schedulers hold back. It is what the worker's JobStore is given.
type Queue struct {
	*base
	QueueFigures
}

// The queue of record: what a worker does with the jobs in Postgres. It
// claims queued jobs (Claim), renews the leases it still holds (Heartbeat),
// changes the jobs it holds under their lease token (MarkCalling,
// MarkRetrying, Release, MarkFailed, MarkExpired, and RecordDeadLetter with
// a lease), stores results (StoreResult), and sweeps what nobody holds
// (ReapExpired, ExpireOverdue). docs/design/queue-of-record.md.

// ClaimRequest asks Claim for queued jobs of one model.
type ClaimRequest struct {
	// Model is the requested model of the jobs. Required.
	Model string
	// Owner names the claiming worker (heartbeats renew its leases).
	// Required.
	Owner string
	// Lease is how long the claim holds the jobs unless renewed. Required.
	Lease time.Duration
	// Limit is the most jobs taken. Required.
	Limit int
	// Order is the order of each tenant's jobs; nil = ClaimOrderDefault.
	// Between tenants the claim takes turns by weight (Order.Tenants of
	// the store).
	Order ClaimOrder
	// TypicalTokens is what a job recorded without an estimate counts in
	// the fair share (the lane's typical job); 0 = 1.
	TypicalTokens int
	// HoldDeferrable leaves deferrable jobs whose lane is undecided for
	// the batch lane, except those whose deadline is at or before
	// HoldDeadlineAfter (too near for a batch).
	HoldDeferrable    bool
	HoldDeadlineAfter time.Time
	// LiveReason is recorded as the lane reason of a deferrable job taken
	// by the live lane for the first time ("" records nothing).
	LiveReason string
	// FallbackOnly takes only jobs that name fallback models of their own
	// (the model's lane is paused, and its jobs can only move on).
	FallbackOnly bool
	// TenantCaps bounds the jobs taken of each tenant it names (0: none
	// of them): the tenants whose own quota admits only so many soon
	// (docs/design/tenants.md). The others are bounded by Limit alone.
	TenantCaps map[string]int
	// HeldProjects are projects whose jobs are not taken (their own quota
	// is spent); their tenants' other jobs are.
	HeldProjects []ScopeRef
	// TokenRoom, when > 0, bounds the tokens of the jobs taken (each
	// counted as in the fair share): the claim takes jobs in claim order
	// while their tokens add up to at most TokenRoom, and leaves queued the
	// first job that does not fit and every job after it, in their places
	// (ClaimWithin reports it). 0 = no bound.
	TokenRoom float64
}

// Claim moves up to r.Limit queued jobs of r.Model to running for r.Owner,
// in claim order (jobs whose deadline is within DeadlineLead first, then
// the tenants' turns by weight, each tenant's jobs in r.Order), skipping jobs other claimers hold locked (FOR UPDATE SKIP
// LOCKED): concurrent claimers get disjoint jobs. Each claimed job gets a
// new lease token (its Lease), phase waiting_for_quota and a lease until
// now + r.Lease. It returns the claimed records in claim order, none when
// nothing is queued.
func (s *Queue) Claim(ctx context.Context, r ClaimRequest) ([]*JobRecord, error) {
	recs, _, err := s.ClaimWithin(ctx, r)
	return recs, err
}

// ClaimWithin is Claim that also reports whether r.TokenRoom left a job
// queued: the first in claim order that did not fit (so the model's
// backlog waits for quota, not for work).
func (s *Queue) ClaimWithin(ctx context.Context, r ClaimRequest) (recs []*JobRecord, left bool, err error) {
	if r.Model == "" || r.Owner == "" || r.Lease <= 0 || r.Limit <= 0 {
		return nil, false, fmt.Errorf("store: claim: Model, Owner, a positive Lease and a positive Limit are required")
	}
	now := s.clock()
	tenants, ws := weights(s.order.tenants())
	sql, args := newClaimPlan(r, s.order.tenants().HasBudgets()).statement(r,
		claimValues{now: now, urgentBefore: now.Add(s.order.DeadlineLead), tenants: tenants, weights: ws})
	rows, err := s.pool.Query(ctx, sql, args...)
	if err == nil {
		recs, err = pgx.CollectRows(rows, scanJob)
	}
	if err != nil {
		err = fmt.Errorf("store: claim %q: %w", r.Model, err)
		if !maybeWritten(err) {
			return nil, false, err
		}
		return nil, false, &UnansweredClaimError{Owner: r.Owner, At: now, Until: now.Add(r.Lease), Err: err}
	}
	// The job the room left comes last, as it is: queued.
	if n := len(recs); n > 0 && recs[n-1].Status == llmq.StatusQueued {
		return recs[:n-1], true, nil
	}
	return recs, false, nil
}

// An UnansweredClaimError is a claim sent whose answer did not come back
// (the connection broke, the deadline passed): the statement may have been
// written all the same, its jobs then running under Owner's lease with no
// worker holding them, until the lease ends and the reaper hands them back.
// [Queue.ReleaseClaim] hands them back at once.
type UnansweredClaimError struct {
	Owner string
	// At is the claim's time, the updated_at of the rows it wrote; Until
	// their lease's end.
	At, Until time.Time
	Err       error
}

func (e *UnansweredClaimError) Error() string { return e.Err.Error() + " (its answer was lost)" }

func (e *UnansweredClaimError) Unwrap() error { return e.Err }

// maybeWritten reports whether a statement that failed with err may have
// been written: not when it was never sent (no connection, or pgx says so)
// or when Postgres answered with an error (its transaction rolled back).
func maybeWritten(err error) bool {
	_, refused := errors.AsType[*pgconn.PgError](err)
	_, unconnected := errors.AsType[*pgconn.ConnectError](err)
	return !refused && !unconnected && !pgconn.SafeToRetry(err)
}

// ReleaseClaim hands back (→ queued) the jobs the unanswered claim u took,
// if it was written: the rows of u's owner still as the claim left them
// (its time, its lease's end, waiting for quota); a row changed since is
// not u's alone any more and is left as it is. The claim's worker never
// held them, so none was called. It returns the jobs handed back (none
// when the claim was not written).
func (s *Queue) ReleaseClaim(ctx context.Context, u *UnansweredClaimError) ([]Key, error) {
	return s.keys(ctx, "release an unanswered claim", `UPDATE jobs SET status = `+tRelease.to+`, lease_owner = '',
		lease_expires_at = NULL, phase = '', updated_at = $4
		WHERE status `+tRelease.in+` AND lease_expires_at = $3 AND lease_owner = $1 AND updated_at = $2
			AND phase = '`+PhaseWaitingForQuota+`' RETURNING tenant, id`, u.Owner, u.At, u.Until, s.clock())
}

// Heartbeat renews, until now + lease, the leases held of owner's jobs,
// in one statement, and returns those it renewed. A lease missing from the
// answer is no longer the job's (reaped after it expired, then maybe
// claimed again) or the job has finished. Only the leases given are
// renewed: a job its worker gave up is left to expire.
func (s *Queue) Heartbeat(ctx context.Context, owner string, lease time.Duration, held []Lease) ([]Lease, error) {
	if len(held) == 0 {
		return nil, nil
	}
	tenants, ids, tokens := make([]string, len(held)), make([]string, len(held)), make([]int64, len(held))
	for i, l := range held {
		tenants[i], ids[i], tokens[i] = l.Tenant, l.ID, l.Token
	}
	rows, err := s.pool.Query(ctx, `UPDATE jobs j SET lease_expires_at = $2
		FROM unnest($3::text[], $4::text[], $5::bigint[]) AS u(tenant, id, token)
		WHERE j.tenant = u.tenant AND j.id = u.id AND j.lease_token = u.token AND j.lease_owner = $1
			AND j.status `+leasedIn+`
		RETURNING j.tenant, j.id, j.lease_token`, owner, s.clock().Add(lease), tenants, ids, tokens)
	if err != nil {
		return nil, fmt.Errorf("store: heartbeat: %w", err)
	}
	var out []Lease
	var l Lease
	if _, err := pgx.ForEachRow(rows, []any{&l.Tenant, &l.ID, &l.Token}, func() error {
		out = append(out, l)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("store: heartbeat: %w", err)
	}
	return out, nil
}

// ReapExpired hands back to queued every running or retrying job whose
// lease has expired (its holder died or lost the database), clearing the
// lease and the phase, and returns their keys. The lease token is kept: the
// next claim increments it, and the old holder's fenced changes already
// fail on the status.
func (s *Queue) ReapExpired(ctx context.Context) ([]Key, error) {
	return s.keys(ctx, "reap expired leases", `UPDATE jobs SET status = `+tReapExpired.to+`, lease_owner = '',
		lease_expires_at = NULL, phase = '', updated_at = $1
		WHERE status `+tReapExpired.in+` AND lease_expires_at <= $1 RETURNING tenant, id`, s.clock())
}

// keys runs sql, which returns (tenant, id) rows, and collects them; op
// names the operation in its errors.
func (s *base) keys(ctx context.Context, op, sql string, args ...any) ([]Key, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", op, err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Key])
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", op, err)
	}
	return keys, nil
}

// PolicyState is the part of the worker's policy state kept with the job
// besides its attempts, so that a job claimed again goes on where its last
// holder stopped.
type PolicyState struct {
	// Retries is the number of backoff waits taken.
	Retries int
	// ModelIndex is the position of the current model in the job's model
	// chain (0: the requested model).
	ModelIndex int
	// RateLimited counts the 429s on the current model.
	RateLimited int
	// FreeAttempts counts the job's calls that failed for a provider
	// outage within the worker's outage limit: in attempts, but not
	// counted toward its max_attempts.
	FreeAttempts int

	// Call is the call MarkCalling counts, recorded as the job's next
	// attempt (job_attempts).
	Call Call
	// Answered, when set, is the answer to the job's last call, recorded
	// in the same round trip (MarkCalling after a fallback, MarkRetrying).
	Answered *Answer
}

// fenced runs transition t on the job l holds, under its lease token:
// UPDATE jobs SET status = t.To, updated_at = $3 <set> WHERE tenant = $1
// AND id = $2 AND lease_token = $4 AND status IN t.From RETURNING attempts.
// Extra args start at $5. It returns the job's attempts after the change.
// When no row matched: ErrNotFound, an *IllegalTransitionError (ErrTerminal)
// when the job has finished, else ErrLeaseLost.
func (s *base) fenced(ctx context.Context, op string, t *transition, l Lease, set string, args ...any) (int, error) {
	return s.fencedOp(ctx, op, t, l, fencedSQL{set: set}, args...)
}

// fencedSQL shapes the statement of fencedOp: set is the SET clause's
// tail; wrap, when set, turns the UPDATE (which returns tenant, id,
// attempts, requested_model) into the statement run, which returns
// attempts; answered, when set, is recorded in the same batch; rows, when
// set, lets a group commit merge the op with others of its kind (its
// columns: the statement's arguments).
type fencedSQL struct {
	set      string
	wrap     func(update string) string
	answered *Answer
	rows     *rowKind
}

// fencedOp is fenced with the statement shaped by f.
func (s *base) fencedOp(ctx context.Context, what string, t *transition, l Lease, f fencedSQL, args ...any) (int, error) {
	sql := `UPDATE jobs SET status = ` + t.to + `, updated_at = $3` + f.set +
		` WHERE tenant = $1 AND id = $2 AND lease_token = $4 AND status ` + t.in + ` RETURNING attempts`
	if f.wrap != nil {
		sql = f.wrap(sql + `, tenant, id, requested_model`)
	}
	if t.To.Terminal() {
		sql = notifyDone(sql, unaliased, `attempts`)
	}
	var attempts int
	o := &op{stmts: withAnswer(l.Key, f.answered, stmt{sql, append([]any{l.Tenant, l.ID, s.clock(), l.Token}, args...)}),
		scan: func(rows pgx.Rows) error { return rows.Scan(&attempts) }}
	if f.rows != nil {
		o.row = &rowOp{kind: f.rows, key: l.Key, dest: []any{&attempts}, answer: f.answered}
	}
	found, err := s.do(ctx, o)
	if err != nil {
		return 0, dataError(what+" "+strconv.Quote(l.String()), err)
	}
	if found {
		return attempts, nil
	}
	return 0, s.lost(ctx, what, l, t.To)
}

// lost says why a fenced change of the job l holds matched no row.
func (s *base) lost(ctx context.Context, op string, l Lease, to llmq.Status) error {
	var status llmq.Status
	err := s.pool.QueryRow(ctx, `SELECT status FROM jobs WHERE tenant = $1 AND id = $2`, l.Tenant, l.ID).Scan(&status)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("store: %s %q: %w", op, l.String(), ErrNotFound)
	case err != nil:
		return fmt.Errorf("store: %s %q: %w", op, l.String(), err)
	case status.Terminal():
		return &IllegalTransitionError{Key: l.Key, From: status, To: to}
	}
	return fmt.Errorf("store: %s %q: %w", op, l.String(), ErrLeaseLost)
}

// MarkCalling records, before the call, that the holder of l begins an
// upstream call: phase calling, attempts + 1, started_at set on the first
// call, the policy state st kept (retrying → running after a backoff). It
// returns the job's attempts, this call included. This write comes before
// every call, so attempts count calls per job whatever the deliveries,
// claims and workers. The same statement records the call st.Call as a
// row of job_attempts, and the batch records st.Answered first.
func (s *Queue) MarkCalling(ctx context.Context, l Lease, st PolicyState) (attempts int, err error) {
	return s.fencedOp(ctx, "mark calling", tMarkCalling, l, fencedSQL{
		set: `, phase = '` + PhaseCalling + `', attempts = attempts + 1, started_at = coalesce(started_at, $3),
		retries = $5, model_index = $6, rate_limited = $7, free_attempts = $12`,
		wrap:     func(update string) string { return insertAttemptSQL(update, 8) },
		answered: st.Answered,
		rows:     markCallingRows,
	}, st.Retries, st.ModelIndex, st.RateLimited, st.Call.Model, st.Call.QuotaWait.Milliseconds(), st.Call.Backoff.Milliseconds(),
		st.Call.Entry, st.FreeAttempts)
}

// markCallingRows is MarkCalling for many jobs in one statement, which
// records each call as a row of job_attempts like insertAttemptSQL, and
// the answers to the previous calls (answersCTE).
var markCallingRows = newRowKind(`WITH c AS (UPDATE jobs j SET status = `+tMarkCalling.to+`, updated_at = u.now, phase = '`+PhaseCalling+`',
		attempts = j.attempts + 1, started_at = coalesce(j.started_at, u.now), retries = u.retries,
		model_index = u.model_index, rate_limited = u.rate_limited, free_attempts = u.free_attempts
	FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::bigint[], $5::int[], $6::int[], $7::int[], $8::text[],
		$9::bigint[], $10::bigint[], $11::text[], $12::int[])
		WITH ORDINALITY AS u(tenant, id, now, token, retries, model_index, rate_limited, model, quota_wait, backoff, entry,
			free_attempts, n)
	WHERE j.tenant = u.tenant AND j.id = u.id AND j.lease_token = u.token AND j.status `+tMarkCalling.in+`
	RETURNING u.n, j.attempts, j.tenant, j.id, j.requested_model, u.now, u.model, u.quota_wait, u.backoff, u.entry
), a AS (
	INSERT INTO job_attempts (tenant, job_id, seq, attempt, model, started_at, quota_wait_ms, backoff_ms, entry)
	SELECT c.tenant, c.id, coalesce((SELECT max(seq) FROM job_attempts x WHERE x.tenant = c.tenant AND x.job_id = c.id), 0) + 1,
		c.attempts, coalesce(nullif(c.model, ''), c.requested_model), c.now, c.quota_wait, c.backoff, c.entry FROM c
) SELECT n, attempts FROM c`, 12, func(ops []*op) []any {
	return []any{column[string](ops, 0), column[string](ops, 1), column[time.Time](ops, 2), column[int64](ops, 3),
		column[int](ops, 4), column[int](ops, 5), column[int](ops, 6), column[string](ops, 7),
		column[int64](ops, 8), column[int64](ops, 9), column[string](ops, 10), column[int](ops, 11)}
})

// MarkRetrying records a retryable failure of the call of the holder of l
// (running → retrying, phase backing_off) and the policy state after it.
// The holder keeps the lease (heartbeats renew it) and waits out its
// backoff before MarkCalling again.
func (s *Queue) MarkRetrying(ctx context.Context, l Lease, st PolicyState, code, msg string) error {
	_, err := s.fencedOp(ctx, "mark retrying", tMarkRetrying, l, fencedSQL{
		set: `, phase = '` + PhaseBackingOff + `', error_code = $5, error_message = $6, retries = $7, model_index = $8,
		rate_limited = $9, free_attempts = $10`,
		answered: st.Answered,
	}, code, msg, st.Retries, st.ModelIndex, st.RateLimited, st.FreeAttempts)
	return err
}

// Release hands the job l holds back to queued (a worker that stops before
// finishing it, or a job its model cannot take now): lease and phase
// cleared, its place in the claim order kept.
func (s *Queue) Release(ctx context.Context, l Lease) error {
	_, err := s.fenced(ctx, "release", tRelease, l, `, lease_owner = '', lease_expires_at = NULL, phase = ''`)
	return err
}

// terminalSet is the SET clause of a fenced move to a terminal failure:
// code $5, message $6.
const terminalSet = `, error_code = $5, error_message = $6, finished_at = $3, lease_expires_at = NULL, phase = ''`

// MarkFailed ends the job l holds with a permanent error (failed): status
// is the HTTP status the upstream answered with, 0 when the failure is
// llmq's own (a body that no longer parses, a request too large).
func (s *Queue) MarkFailed(ctx context.Context, l Lease, status int, code, msg string) error {
	_, err := s.fenced(ctx, "mark failed", tMarkFailed, l, terminalSet+`, error_status = $7`, code, msg, status)
	return err
}

// ErrorCodeExpired is the error_code of an expired job.
const ErrorCodeExpired = "expired"

// MarkExpired ends the job l holds, whose deadline passed before its first
// call (or will, by the predicted admission), as expired with why.
func (s *Queue) MarkExpired(ctx context.Context, l Lease, why string) error {
	_, err := s.fenced(ctx, "mark expired", tMarkExpired, l, terminalSet, ErrorCodeExpired, why)
	return err
}

// Result is what StoreResult writes.
type Result struct {
	// Response is the upstream chat-completion response (JSON).
	Response json.RawMessage
	// UsedModel is the model that answered (differs from the requested one
	// after a fallback).
	UsedModel        string
	PromptTokens     int
	CompletionTokens int
	CostUSD          float64
	// Answered, when set, is the answer's record on the job's attempt,
	// written in the same round trip.
	Answered *Answer
}

// StoreResult moves job k to succeeded with its result, exactly once: when
// the job already succeeded it changes nothing and returns stored=false
// with no error. The lease is not checked: a paid answer counts even from
// a holder whose lease lapsed, whether the job was reaped (queued), claimed
// again (running, retrying) or put in a batch; the holder that comes second
// stores nothing. Another terminal state returns an *IllegalTransitionError
// (ErrTerminal); a result Postgres cannot hold (a NUL character, a value
// too large) ErrInvalidJob.
func (s *Queue) StoreResult(ctx context.Context, k Key, r Result) (stored bool, err error) {
	var resp any
	if len(r.Response) > 0 {
		resp = []byte(r.Response)
	}
	sql := `UPDATE jobs SET status = ` + tStoreResult.to + `, updated_at = $3, result = $4, used_model = $5,
		prompt_tokens = $6, completion_tokens = $7, cost_usd = $8, finished_at = $3, lease_expires_at = NULL,
		phase = '', error_code = '', error_message = ''
	WHERE tenant = $1 AND id = $2 AND status ` + tStoreResult.in + ` RETURNING true AS stored`
	sql = notifyDone(sql, unaliased, `stored`)
	found, err := s.do(ctx, &op{stmts: withAnswer(k, r.Answered, stmt{sql, []any{k.Tenant, k.ID, s.clock(), resp, r.UsedModel,
		r.PromptTokens, r.CompletionTokens, r.CostUSD}}), row: &rowOp{kind: storeResultRows, key: k, answer: r.Answered}})
	if err != nil {
		return false, dataError("store result "+strconv.Quote(k.String()), err)
	}
	if found {
		return true, nil
	}
	var status llmq.Status
	err = s.pool.QueryRow(ctx, `SELECT status FROM jobs WHERE tenant = $1 AND id = $2`, k.Tenant, k.ID).Scan(&status)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, fmt.Errorf("store: store result %q: %w", k.String(), ErrNotFound)
	case err != nil:
		return false, fmt.Errorf("store: store result %q: %w", k.String(), err)
	case status == llmq.StatusSucceeded:
		return false, nil
	}
	return false, &IllegalTransitionError{Key: k, From: status, To: llmq.StatusSucceeded}
}

// storeResultRows is StoreResult for many jobs in one statement, which
// records their answers too (answersCTE).
var storeResultRows = newRowKind(notifyDone(`UPDATE jobs j SET status = `+tStoreResult.to+`, updated_at = u.now, result = u.result,
		used_model = u.used_model, prompt_tokens = u.prompt_tokens, completion_tokens = u.completion_tokens,
		cost_usd = u.cost_usd, finished_at = u.now, lease_expires_at = NULL, phase = '', error_code = '',
		error_message = ''
	FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::jsonb[], $5::text[], $6::int[], $7::int[],
		$8::float8[]) WITH ORDINALITY AS u(tenant, id, now, result, used_model, prompt_tokens, completion_tokens,
		cost_usd, n)
	WHERE j.tenant = u.tenant AND j.id = u.id AND j.status `+tStoreResult.in+`
	RETURNING u.n`, aliasJ, `n`), 8, func(ops []*op) []any {
	return []any{column[string](ops, 0), column[string](ops, 1), column[time.Time](ops, 2), column[[]byte](ops, 3),
		column[string](ops, 4), column[int](ops, 5), column[int](ops, 6), column[float64](ops, 7)}
})

// MarkDeadLettered ends a queued job that nobody holds as dead_lettered
// (its message was given up by the broker, or cannot be published); code
// is the dead-letter reason class. A job a worker holds is dead-lettered
// by its holder (RecordDeadLetter with NewDeadLetter.LeaseToken).
func (s *DeadLetters) MarkDeadLettered(ctx context.Context, k Key, code, msg string) error {
	_, err := s.move(ctx, "mark dead-lettered", tMarkDeadLettered, k,
		`, error_code = $4, error_message = $5, finished_at = $3, lease_expires_at = NULL, phase = ''`, code, msg)
	return err
}

// QueuedModels lists the requested models of the queued jobs of the live
// lane, for schedulers that did not ingest them themselves.
func (s *Queue) QueuedModels(ctx context.Context) ([]string, error) {
	// A loose index scan over jobs_fair_idx: one probe per model, however
	// long the backlog.
	rows, err := s.pool.Query(ctx, `WITH RECURSIVE m AS (
			(SELECT requested_model FROM jobs WHERE status = 'queued' ORDER BY requested_model LIMIT 1)
			UNION ALL
			SELECT (SELECT requested_model FROM jobs WHERE status = 'queued' AND requested_model > m.requested_model
				ORDER BY requested_model LIMIT 1) FROM m WHERE m.requested_model IS NOT NULL)
		SELECT requested_model FROM m WHERE requested_model IS NOT NULL`)
	if err != nil {
		return nil, fmt.Errorf("store: queued models: %w", err)
	}
	models, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("store: queued models: %w", err)
	}
	return models, nil
}

// QueuedCount counts the queued jobs, up to limit: the ingest window only
// asks whether it is full, and a count of the whole backlog costs a scan
// of every queued job's index entry (at 1,000,000 queued jobs about
// 0.5 s, where 10,000 cost a few ms; docs/design/queue-of-record.md).
func (s *Queue) QueuedCount(ctx context.Context, limit int64) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT FROM jobs WHERE status = 'queued' LIMIT $1) q`,
		limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: count queued: %w", err)
	}
	return n, nil
}
