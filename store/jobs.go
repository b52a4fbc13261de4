package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/llmq/llmq"
)

const insertSQL = `INSERT INTO jobs (id, tenant, status, priority, requested_model, body, created_at,
	updated_at, deadline, "deferrable", fallback_models, metadata)
VALUES ($1, $2, 'queued', $3, $4, $5, $6, $6, $7, $8, $9, $10)
ON CONFLICT (id) DO NOTHING`

func insertArgs(j *llmq.Job, now time.Time) []any {
	fallbacks := j.FallbackModels
	if fallbacks == nil {
		fallbacks = []string{}
	}
	meta := j.Metadata
	if meta == nil {
		meta = map[string]string{}
	}
	return []any{j.ID, j.Tenant, string(j.Priority), j.Model(), []byte(j.Body), now,
		j.Deadline, j.Deferrable, fallbacks, meta}
}

func validate(op string, j *llmq.Job) error {
	if err := j.Validate(); err != nil {
		return fmt.Errorf("store: %s %q: %w: %w", op, j.ID, ErrInvalidJob, err)
	}
	return nil
}

// Insert records j as queued. An existing row with the same id is left as
// it is and reported with created=false (not an error). j must be valid
// (Decode or Normalize+Validate); an invalid job returns ErrInvalidJob.
func (s *Store) Insert(ctx context.Context, j *llmq.Job) (created bool, err error) {
	if err := validate("insert", j); err != nil {
		return false, err
	}
	tag, err := s.pool.Exec(ctx, insertSQL, insertArgs(j, s.clock())...)
	if err != nil {
		return false, dataError("insert "+strconv.Quote(j.ID), err)
	}
	return tag.RowsAffected() == 1, nil
}

// claimSQL moves a job to running for owner $2 until $3 (now is $4): from
// an unleased status, or from a leased one whose lease has expired or that
// owner already holds.
var claimSQL = `UPDATE jobs SET status = ` + tClaim.to + `, lease_owner = $2, lease_expires_at = $3,
		started_at = coalesce(started_at, $4), attempts = attempts + 1, updated_at = $4
	WHERE id = $1 AND status ` + tClaim.in + `
		AND (status NOT ` + leasedIn + ` OR lease_expires_at IS NULL OR lease_expires_at <= $4 OR lease_owner = $2)
	RETURNING ` + jobColumns

// Claim takes j for work by owner for the lease duration. It first records j
// as queued when no row exists (a message published straight to the broker
// has none), then moves it to running in one conditional UPDATE: from queued
// or retrying, or from running when the lease has expired or owner already
// holds it. A claim sets the lease, started_at (first claim only) and
// increments attempts; both statements run in one round trip and one
// transaction, so of many concurrent claimers exactly one wins.
//
// Errors: ErrTerminal (an *IllegalTransitionError; the record is returned
// too), ErrLeased (another worker holds a live lease), ErrBatched (inside a
// provider batch), ErrInvalidJob.
func (s *Store) Claim(ctx context.Context, j *llmq.Job, owner string, lease time.Duration) (*JobRecord, error) {
	if owner == "" || lease <= 0 {
		return nil, fmt.Errorf("store: claim %q: owner must be set and lease positive (got %q, %v)", j.ID, owner, lease)
	}
	if err := validate("claim", j); err != nil {
		return nil, err
	}
	now := s.clock()
	rec, err := s.run(ctx, stmt{insertSQL, insertArgs(j, now)}, stmt{claimSQL, []any{j.ID, owner, now.Add(lease), now}})
	switch {
	case err != nil:
		return nil, dataError("claim "+strconv.Quote(j.ID), err)
	case rec != nil:
		return rec, nil
	}
	return s.refused(ctx, "claim", j.ID, "", tClaim.To, tClaim.From)
}

// refused reads the job after a conditional UPDATE (to, from the statuses
// in from) matched no row and says why. The record is returned with the
// error (ErrTerminal, ErrLeased, ErrBatched).
func (s *Store) refused(ctx context.Context, op, id, tenant string, to llmq.Status, from []llmq.Status) (*JobRecord, error) {
	sql := `SELECT ` + jobColumns + ` FROM jobs WHERE id = $1`
	args := []any{id}
	if tenant != "" {
		sql += ` AND tenant = $2`
		args = append(args, tenant)
	}
	rec, err := s.queryJob(ctx, sql, args...)
	switch {
	case err != nil:
		return nil, fmt.Errorf("store: %s %q: %w", op, id, err)
	case rec == nil:
		return nil, fmt.Errorf("store: %s %q: %w", op, id, ErrNotFound)
	case rec.Status == llmq.StatusBatched && to == llmq.StatusRunning:
		return rec, fmt.Errorf("store: %s %q: %w", op, id, ErrBatched)
	case slices.Contains(from, rec.Status):
		// The status allowed the move; the lease (owner) check refused it.
		return rec, fmt.Errorf("store: %s %q: %w", op, id, ErrLeased)
	}
	return rec, &IllegalTransitionError{ID: id, From: rec.Status, To: to}
}

// move runs transition t on job id in one conditional UPDATE:
// UPDATE jobs SET status = t.To, <set> WHERE id = $1 AND status IN t.From
// <cond>. Placeholders $1 and $2 are id and now; extra args start at $3.
// When no row matched it reads the job to say why (see refused); tenant,
// when set, scopes that read.
func (s *Store) move(ctx context.Context, op string, t *transition, id, tenant, set, cond string, args ...any) (*JobRecord, error) {
	sql := `UPDATE jobs SET status = ` + t.to + `, updated_at = $2` + set +
		` WHERE id = $1 AND status ` + t.in + cond + ` RETURNING ` + jobColumns
	rec, err := s.run(ctx, stmt{sql, append([]any{id, s.clock()}, args...)})
	if err != nil {
		return nil, dataError(op+" "+strconv.Quote(id), err)
	}
	if rec != nil {
		return rec, nil
	}
	return s.refused(ctx, op, id, tenant, t.To, t.From)
}

// ExtendLease pushes the lease of a running or retrying job held by owner to
// now+lease. ErrLeased when another worker took it over.
func (s *Store) ExtendLease(ctx context.Context, id, owner string, lease time.Duration) error {
	now := s.clock()
	tag, err := s.pool.Exec(ctx, `UPDATE jobs SET lease_expires_at = $3, updated_at = $4
		WHERE id = $1 AND lease_owner = $2 AND status `+leasedIn, id, owner, now.Add(lease), now)
	if err != nil {
		return fmt.Errorf("store: extend lease %q: %w", id, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	_, err = s.refused(ctx, "extend lease", id, "", llmq.StatusRunning, nil)
	if errors.Is(err, ErrIllegalTransition) && !errors.Is(err, ErrTerminal) {
		// Released (queued) or retrying/running under another owner: the
		// caller no longer holds the job.
		return fmt.Errorf("store: extend lease %q: %w", id, ErrLeased)
	}
	return err
}

// Release hands a running or retrying job held by owner back to queued and
// clears its lease, for a worker that shuts down before finishing it.
func (s *Store) Release(ctx context.Context, id, owner string) error {
	_, err := s.move(ctx, "release", tRelease, id, "",
		`, lease_owner = '', lease_expires_at = NULL`, ` AND lease_owner = $3`, owner)
	return err
}

// MarkRetrying records a retryable failure of the running job held by owner
// (running → retrying). The lease is kept: the worker waits out its backoff
// and claims again (extend the lease if the backoff is longer).
func (s *Store) MarkRetrying(ctx context.Context, id, owner, code, msg string) error {
	_, err := s.move(ctx, "mark retrying", tMarkRetrying, id, "",
		`, error_code = $4, error_message = $5`, ` AND lease_owner = $3`, owner, code, msg)
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
}

// StoreResult moves a running, retrying or batched job to succeeded with its
// result, exactly once: when the job already succeeded it changes nothing
// and returns stored=false with no error. Any worker may store the result,
// not only the lease holder, so a call that outlived its lease still counts.
// Another terminal
// state returns an *IllegalTransitionError (ErrTerminal).
func (s *Store) StoreResult(ctx context.Context, id string, r Result) (stored bool, err error) {
	var resp any
	if len(r.Response) > 0 {
		resp = []byte(r.Response)
	}
	_, err = s.move(ctx, "store result", tStoreResult, id, "",
		`, result = $3, used_model = $4, prompt_tokens = $5, completion_tokens = $6, cost_usd = $7,
		finished_at = $2, lease_expires_at = NULL, error_code = '', error_message = ''`, ``,
		resp, r.UsedModel, r.PromptTokens, r.CompletionTokens, r.CostUSD)
	var ite *IllegalTransitionError
	if errors.As(err, &ite) && ite.From == llmq.StatusSucceeded {
		return false, nil
	}
	return err == nil, err
}

// terminal moves a job to a terminal failure state with an error code and
// message.
func (s *Store) terminal(ctx context.Context, op string, t *transition, id, code, msg string) error {
	_, err := s.move(ctx, op, t, id, "",
		`, error_code = $3, error_message = $4, finished_at = $2, lease_expires_at = NULL`, ``, code, msg)
	return err
}

// MarkFailed ends a running, retrying or batched job with a permanent error
// (failed).
func (s *Store) MarkFailed(ctx context.Context, id, code, msg string) error {
	return s.terminal(ctx, "mark failed", tMarkFailed, id, code, msg)
}

// MarkDeadLettered ends a job whose retries are exhausted or whose message is
// poison (dead_lettered); code is the dead-letter reason class.
func (s *Store) MarkDeadLettered(ctx context.Context, id, code, msg string) error {
	return s.terminal(ctx, "mark dead-lettered", tMarkDeadLettered, id, code, msg)
}

// ErrorCodeExpired is the error_code of an expired job.
const ErrorCodeExpired = "expired"

// MarkExpired ends a job whose deadline passed before it could run.
func (s *Store) MarkExpired(ctx context.Context, id string) error {
	return s.terminal(ctx, "mark expired", tMarkExpired, id, ErrorCodeExpired, "deadline passed before the job started")
}

// ExpireOverdue moves every queued job whose deadline has passed to expired
// and returns their ids (a sweep, so that pollers see expired jobs whose
// messages are still waiting in the broker).
func (s *Store) ExpireOverdue(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `UPDATE jobs SET status = `+tExpireOverdue.to+`, error_code = $2,
		error_message = 'deadline passed before the job started', finished_at = $1, updated_at = $1
		WHERE status `+tExpireOverdue.in+` AND deadline <= $1 RETURNING id`, s.clock(), ErrorCodeExpired)
	if err != nil {
		return nil, fmt.Errorf("store: expire overdue: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("store: expire overdue: %w", err)
	}
	return ids, nil
}

// ErrorCodeCancelled is the error_code of a cancelled job.
const ErrorCodeCancelled = "cancelled"

// Cancel cancels a queued job of tenant and returns it. ErrNotFound when the
// tenant has no such job; an *IllegalTransitionError when it has started or
// finished.
func (s *Store) Cancel(ctx context.Context, tenant, id string) (*JobRecord, error) {
	return s.move(ctx, "cancel", tCancel, id, tenant,
		`, error_code = '`+ErrorCodeCancelled+`', error_message = 'cancelled by the API', finished_at = $2`,
		` AND tenant = $3`, tenant)
}

// MarkBatched moves the queued jobs among ids into provider batch batchID
// (lane batch) and returns the ids it moved; the others were no longer
// queued and are left alone.
func (s *Store) MarkBatched(ctx context.Context, batchID, reason string, ids []string) ([]string, error) {
	rows, err := s.pool.Query(ctx, `UPDATE jobs SET status = `+tMarkBatched.to+`, batch_id = $2, lane = 'batch',
		lane_reason = $3, updated_at = $4 WHERE id = ANY($1) AND status `+tMarkBatched.in+` RETURNING id`,
		ids, batchID, reason, s.clock())
	if err != nil {
		return nil, fmt.Errorf("store: mark batched %q: %w", batchID, err)
	}
	moved, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("store: mark batched %q: %w", batchID, err)
	}
	return moved, nil
}

// Unbatch returns a batched job to the live lane (batched → queued), e.g.
// when its batch failed or expired; reason is kept in lane_reason.
func (s *Store) Unbatch(ctx context.Context, id, reason string) error {
	_, err := s.move(ctx, "unbatch", tUnbatch, id, "",
		`, lane = 'live', batch_id = '', lane_reason = $3`, ``, reason)
	return err
}

// Get returns the job id of tenant, ErrNotFound when the tenant has none.
func (s *Store) Get(ctx context.Context, tenant, id string) (*JobRecord, error) {
	rec, err := s.queryJob(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = $1 AND tenant = $2`, id, tenant)
	if err != nil {
		return nil, fmt.Errorf("store: get %q: %w", id, err)
	}
	if rec == nil {
		return nil, fmt.Errorf("store: get %q: %w", id, ErrNotFound)
	}
	return rec, nil
}

// GetByID returns the job id whatever its tenant (for workers).
func (s *Store) GetByID(ctx context.Context, id string) (*JobRecord, error) {
	rec, err := s.queryJob(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = $1`, id)
	if err != nil {
		return nil, fmt.Errorf("store: get %q: %w", id, err)
	}
	if rec == nil {
		return nil, fmt.Errorf("store: get %q: %w", id, ErrNotFound)
	}
	return rec, nil
}

// List limits.
const (
	ListLimitDefault = 100
	ListLimitMax     = 1000
)

// ListOptions select a page of one tenant's jobs, newest first.
type ListOptions struct {
	// Tenant is required unless AllTenants is set.
	Tenant string
	// AllTenants lists every tenant's jobs (operators' tools only; the
	// HTTP API always lists one tenant). Tenant then narrows to one
	// tenant when set.
	AllTenants bool
	// Status filters to one status; "" lists all.
	Status llmq.Status
	// Limit is the page size: 0 means ListLimitDefault, capped at ListLimitMax.
	Limit int
	// After is the cursor returned with the previous page; "" starts at the
	// newest job.
	After string
}

// List returns one page of jobs, newest first (created_at, then id,
// descending), and the cursor of the next page ("" after the last page).
func (s *Store) List(ctx context.Context, o ListOptions) ([]*JobRecord, string, error) {
	limit := o.Limit
	if limit <= 0 {
		limit = ListLimitDefault
	}
	limit = min(limit, ListLimitMax)
	if o.Tenant == "" && !o.AllTenants {
		return nil, "", errors.New("store: list: a tenant is required unless AllTenants is set")
	}
	sql := `SELECT ` + jobColumns + ` FROM jobs WHERE true`
	var args []any
	if o.Tenant != "" {
		args = append(args, o.Tenant)
		sql += fmt.Sprintf(` AND tenant = $%d`, len(args))
	}
	if o.Status != "" {
		args = append(args, string(o.Status))
		sql += fmt.Sprintf(` AND status = $%d`, len(args))
	}
	if o.After != "" {
		at, id, err := decodeCursor(o.After)
		if err != nil {
			return nil, "", err
		}
		args = append(args, at, id)
		sql += fmt.Sprintf(` AND (created_at, id) < ($%d, $%d)`, len(args)-1, len(args))
	}
	args = append(args, limit+1)
	sql += fmt.Sprintf(` ORDER BY created_at DESC, id DESC LIMIT $%d`, len(args))
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, "", fmt.Errorf("store: list: %w", err)
	}
	recs, err := pgx.CollectRows(rows, scanJob)
	if err != nil {
		return nil, "", fmt.Errorf("store: list: %w", err)
	}
	if len(recs) <= limit {
		return recs, "", nil
	}
	recs = recs[:limit]
	last := recs[limit-1]
	return recs, encodeCursor(last.CreatedAt, last.ID), nil
}

// CountByStatus counts a tenant's jobs per status ("" tenant: all tenants).
func (s *Store) CountByStatus(ctx context.Context, tenant string) (map[llmq.Status]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT status, count(*) FROM jobs WHERE $1 = '' OR tenant = $1 GROUP BY status`, tenant)
	if err != nil {
		return nil, fmt.Errorf("store: count: %w", err)
	}
	out := map[llmq.Status]int64{}
	var st string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&st, &n}, func() error {
		out[llmq.Status(st)] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: count: %w", err)
	}
	return out, nil
}

func encodeCursor(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at.UnixMicro(), 10) + ":" + id))
}

func decodeCursor(c string) (time.Time, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", fmt.Errorf("%w: %q", ErrBadCursor, c)
	}
	micros, id, ok := strings.Cut(string(b), ":")
	us, err := strconv.ParseInt(micros, 10, 64)
	if !ok || err != nil || id == "" {
		return time.Time{}, "", fmt.Errorf("%w: %q", ErrBadCursor, c)
	}
	return time.UnixMicro(us).UTC(), id, nil
}
