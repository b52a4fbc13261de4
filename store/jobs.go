package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/llmq/llmq"
)

// Jobs is what is read and changed of a job outside its queue: a job and
// its calls (attempts.go) as the API shows them, its cancellation, the
// counts and rates of the jobs, and the figures of a run (the demo's, the
// bench's). It is what api.JobStore is given.
type Jobs struct{ *base }

const insertSQL = `INSERT INTO jobs (id, tenant, status, priority, requested_model, body, created_at,
	updated_at, deadline, "deferrable", fallback_models, metadata, sched_key, est_prompt_tokens, est_output_tokens,
	project, trace_context, reply)
SELECT $1, $2, 'queued', $3, $4, $5, $6, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16::jsonb
WHERE NOT EXISTS (SELECT 1 FROM job_tombstones t WHERE t.tenant = $2 AND t.id = $1)
ON CONFLICT (tenant, id) DO NOTHING`

// NewJob is a job to record, with the shaping estimate its recorder made
// (Sizer: the worker when it ingests the message, the producer when it
// records the job in its outbox; zero when none was made: the worker
// estimates when it claims the job).
type NewJob struct {
	Job *llmq.Job
	// EstPromptTokens is the tokenizer's count of the prompt.
	EstPromptTokens int
	// EstOutputTokens is the output allowance reserved for the job: n x
	// (max_tokens, else the model's default allowance).
	EstOutputTokens int
	// SizeDelay is how much later than its creation the job sorts among
	// the jobs of its priority (SchedKey), for its size: the worker gives
	// a job its estimated tokens' time at the model's TPM, so when the
	// TPM binds short jobs are not held behind long documents, and a long
	// one is passed only by jobs recorded less than that time after it
	// (docs/design/queue-of-record.md, "The claim order"). Zero: none.
	SizeDelay time.Duration
}

func (s *base) insertArgs(n NewJob, now time.Time) []any {
	j := n.Job
	fallbacks := j.FallbackModels
	if fallbacks == nil {
		fallbacks = []string{}
	}
	meta := j.Metadata
	if meta == nil {
		meta = map[string]string{}
	}
	return []any{j.ID, j.Tenant, string(j.Priority), j.Model(), []byte(j.Body), now,
		j.Deadline, j.Deferrable, fallbacks, meta, SchedKey(now, s.order.tenants().Priority(j), j.Deadline, n.SizeDelay, s.order),
		n.EstPromptTokens, n.EstOutputTokens, j.Project, j.TraceContext, replyJSON(j.ReplyTo)}
}

// replyJSON is the jobs.reply of a job's route: NULL when it names no
// destination.
func replyJSON(r *llmq.Reply) *string {
	if r.Empty() {
		return nil
	}
	b, err := json.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("store: encode reply: %v", err)) // strings and a string map always encode
	}
	s := string(b)
	return &s
}

// validate refuses an invalid job with ErrInvalidJob. A job exactly as
// llmq.Decode returned it is not validated again: Decode did, in this
// process, on the same bytes (the worker's ingest decodes each message,
// then records the job).
func validate(op string, j *llmq.Job) error {
	if j.Validated() {
		return nil
	}
	if err := j.Validate(); err != nil {
		return fmt.Errorf("store: %s %q: %w: %w", op, j.ID, ErrInvalidJob, err)
	}
	return nil
}

// Insert records j as queued. An existing job of the same tenant with the
// same id is left as it is and reported with created=false (not an error).
// j must be valid (Decode or Normalize+Validate); an invalid job returns
// ErrInvalidJob.
func (s *Jobs) Insert(ctx context.Context, j *llmq.Job) (created bool, err error) {
	if err := validate("insert", j); err != nil {
		return false, err
	}
	tag, err := s.pool.Exec(ctx, insertSQL, s.insertArgs(NewJob{Job: j}, s.clock())...)
	if err != nil {
		return false, dataError("insert "+strconv.Quote(j.ID), err)
	}
	created = tag.RowsAffected() == 1
	if created {
		s.announce.announce(j.Model())
	}
	return created, nil
}

// jobValues is the SELECT list of a multi-row insert from the unnest of
// jobArrays (alias u); the columns are jobInsertColumns.
const (
	jobInsertColumns = `tenant, id, status, priority, requested_model, body, created_at, updated_at,
	deadline, "deferrable", fallback_models, metadata, sched_key, est_prompt_tokens, est_output_tokens, project,
	trace_context, reply`
	jobValues = `u.tenant, u.id, 'queued', u.priority, u.model, u.body::jsonb, $1, $1, u.deadline, u.dfr,
	ARRAY(SELECT jsonb_array_elements_text(u.fallbacks::jsonb)), u.metadata::jsonb, u.sched_key, u.ep, u.eo,
	u.project, u.trace, u.reply::jsonb`
	// jobUnnest reads jobArrays' arrays, $2 onwards ($1 is now).
	jobUnnest = `unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::timestamptz[], $8::bool[],
	$9::text[], $10::text[], $11::timestamptz[], $12::int[], $13::int[], $14::text[], $15::text[], $16::text[])`
	jobUnnestColumns = `tenant, id, priority, model, body, deadline, dfr, fallbacks, metadata, sched_key, ep, eo, project, trace, reply`
)

// ingestSQL records many jobs in one statement: $1 is now, $2.. the
// columns as arrays (fallback models and metadata as JSON text).
const ingestSQL = `INSERT INTO jobs (` + jobInsertColumns + `)
SELECT ` + jobValues + `
FROM ` + jobUnnest + ` AS u(` + jobUnnestColumns + `)
WHERE NOT EXISTS (SELECT 1 FROM job_tombstones t WHERE t.tenant = u.tenant AND t.id = u.id)
ON CONFLICT (tenant, id) DO NOTHING
RETURNING tenant, id`

// jobArrays turns jobs into the arguments of a multi-row insert: now,
// then one array per column of jobUnnestColumns. op names the caller in
// errors; the caller has validated every job.
func (s *base) jobArrays(op string, jobs []NewJob, now time.Time) ([]any, error) {
	n := len(jobs)
	var (
		tenants, ids, prios, models, bodies = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		projects, traces                    = make([]string, n), make([]string, n)
		deadlines                           = make([]*time.Time, n)
		deferrable                          = make([]bool, n)
		fallbacks, metas                    = make([]string, n), make([]string, n)
		keys                                = make([]time.Time, n)
		replies                             = make([]*string, n)
		ep, eo                              = make([]int32, n), make([]int32, n)
	)
	for i, nj := range jobs {
		j := nj.Job
		fb := []byte("[]")
		if j.FallbackModels != nil {
			var err error
			if fb, err = json.Marshal(j.FallbackModels); err != nil {
				return nil, fmt.Errorf("store: %s %q: %w", op, j.ID, err)
			}
		}
		meta := []byte("{}")
		if len(j.Metadata) > 0 {
			var err error
			if meta, err = json.Marshal(j.Metadata); err != nil {
				return nil, fmt.Errorf("store: %s %q: %w", op, j.ID, err)
			}
		}
		tenants[i], ids[i], prios[i], models[i], bodies[i] = j.Tenant, j.ID, string(j.Priority), j.Model(), string(j.Body)
		deadlines[i], deferrable[i], fallbacks[i], metas[i] = j.Deadline, j.Deferrable, string(fb), string(meta)
		keys[i] = SchedKey(now, s.order.tenants().Priority(j), j.Deadline, nj.SizeDelay, s.order)
		projects[i], traces[i], replies[i] = j.Project, j.TraceContext, replyJSON(j.ReplyTo)
		ep[i], eo[i] = int32(min(nj.EstPromptTokens, math.MaxInt32)), int32(min(nj.EstOutputTokens, math.MaxInt32))
	}
	return []any{now, tenants, ids, prios, models, bodies, deadlines, deferrable, fallbacks, metas, keys, ep, eo, projects, traces, replies}, nil
}

// Ingest records jobs as queued in one statement (all or none) and
// reports which it created: created[i] is false when the tenant already
// had a job with jobs[i]'s id (a duplicate delivery, or a job the producer
// recorded), or when jobs[i] repeats an earlier key of the same call; such
// a job is left as it is. Every job must be valid; an invalid one, or one
// whose data Postgres refuses, fails the whole call with ErrInvalidJob
// (record the jobs one by one to find it).
func (s *Queue) Ingest(ctx context.Context, jobs []NewJob) (created []bool, err error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	n := len(jobs)
	for _, nj := range jobs {
		if err := validate("ingest", nj.Job); err != nil {
			return nil, err
		}
	}
	args, err := s.jobArrays("ingest", jobs, s.clock())
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, ingestSQL, args...)
	if err != nil {
		return nil, dataError(fmt.Sprintf("ingest %d jobs", n), err)
	}
	inserted := make(map[Key]bool, n)
	var k Key
	if _, err := pgx.ForEachRow(rows, []any{&k.Tenant, &k.ID}, func() error {
		inserted[k] = true
		return nil
	}); err != nil {
		return nil, dataError(fmt.Sprintf("ingest %d jobs", n), err)
	}
	created = make([]bool, n)
	var models []string
	for i, nj := range jobs {
		k := Key{Tenant: nj.Job.Tenant, ID: nj.Job.ID}
		created[i] = inserted[k]
		delete(inserted, k) // a repeated key was created once
		if created[i] {
			models = append(models, nj.Job.Model())
		}
	}
	s.announce.announce(models...)
	return created, nil
}

// refused reads the job after a conditional UPDATE (to, from the statuses
// in from) matched no row and says why: ErrNotFound, or an
// *IllegalTransitionError with the record.
func (s *base) refused(ctx context.Context, op string, k Key, to llmq.Status) (*JobRecord, error) {
	rec, err := s.queryJob(ctx, `SELECT `+jobColumns+` FROM jobs WHERE tenant = $1 AND id = $2`, k.Tenant, k.ID)
	switch {
	case err != nil:
		return nil, fmt.Errorf("store: %s %q: %w", op, k.String(), err)
	case rec == nil:
		return nil, fmt.Errorf("store: %s %q: %w", op, k.String(), ErrNotFound)
	}
	return rec, &IllegalTransitionError{Key: k, From: rec.Status, To: to}
}

// move runs transition t on job k in one conditional UPDATE:
// UPDATE jobs SET status = t.To, <set> WHERE tenant = $1 AND id = $2 AND
// status IN t.From. Placeholders $1, $2 and $3 are tenant, id and now;
// extra args start at $4. When no row matched it reads the job to say why
// (see refused).
func (s *base) move(ctx context.Context, op string, t *transition, k Key, set string, args ...any) (*JobRecord, error) {
	sql := `UPDATE jobs SET status = ` + t.to + `, updated_at = $3` + set +
		` WHERE tenant = $1 AND id = $2 AND status ` + t.in + ` RETURNING ` + jobColumns
	if t.To.Terminal() {
		sql = notifyDone(sql, unaliased, jobColumns)
	}
	var rec *JobRecord
	found, err := s.run(ctx, scanRecord(&rec), stmt{sql, append([]any{k.Tenant, k.ID, s.clock()}, args...)})
	if err != nil {
		return nil, dataError(op+" "+strconv.Quote(k.String()), err)
	}
	if found {
		return rec, nil
	}
	return s.refused(ctx, op, k, t.To)
}

// ExpireOverdue moves every queued job whose deadline has passed to
// expired and returns their keys (the reaper's sweep: a job expires even
// while no worker looks at it).
func (s *Queue) ExpireOverdue(ctx context.Context) ([]Key, error) {
	return s.keys(ctx, "expire overdue", notifyDone(`UPDATE jobs SET status = `+tExpireOverdue.to+`, error_code = $2,
		error_message = 'deadline passed before the job started', finished_at = $1, updated_at = $1
		WHERE status `+tExpireOverdue.in+` AND deadline IS NOT NULL AND deadline <= $1 RETURNING tenant, id`, unaliased, `tenant, id`),
		s.clock(), ErrorCodeExpired)
}

// ErrorCodeCancelled is the error_code of a cancelled job.
const ErrorCodeCancelled = "cancelled"

// Cancel cancels a queued job of tenant and returns it. ErrNotFound when the
// tenant has no such job; an *IllegalTransitionError when it has started or
// finished.
func (s *Jobs) Cancel(ctx context.Context, tenant, id string) (*JobRecord, error) {
	return s.move(ctx, "cancel", tCancel, Key{Tenant: tenant, ID: id},
		`, error_code = '`+ErrorCodeCancelled+`', error_message = 'cancelled by the API', finished_at = $3`)
}

// Get returns the job id of tenant, ErrNotFound when the tenant has none.
// A queued job's WaitingReason is filled in.
func (s *Jobs) Get(ctx context.Context, tenant, id string) (*JobRecord, error) {
	return s.getJob(ctx, tenant, id)
}

// getJob is Get, for every aggregate that reads a job.
func (s *base) getJob(ctx context.Context, tenant, id string) (*JobRecord, error) {
	rec, err := s.queryJob(ctx, `SELECT `+jobColumns+` FROM jobs WHERE tenant = $1 AND id = $2`, tenant, id)
	if err != nil {
		return nil, fmt.Errorf("store: get %q: %w", id, err)
	}
	if rec == nil {
		return nil, fmt.Errorf("store: get %q: %w", id, ErrNotFound)
	}
	if err := s.fillWaitingReasons(ctx, []*JobRecord{rec}); err != nil {
		return nil, fmt.Errorf("store: get %q: %w", id, err)
	}
	return rec, nil
}

// TenantsWithJob returns, sorted, at most limit of the tenants that have a
// job id: the hint of a command given an id without its tenant (an error
// path: it reads every tenant's jobs).
func (s *Jobs) TenantsWithJob(ctx context.Context, id string, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant FROM jobs WHERE id = $1 ORDER BY tenant LIMIT $2`, id, limit)
	if err != nil {
		return nil, fmt.Errorf("store: tenants with job %q: %w", id, err)
	}
	tenants, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("store: tenants with job %q: %w", id, err)
	}
	return tenants, nil
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
// The records leave the body out (nil; Get reads it): a listing shows no
// request, and the server need not turn each one from jsonb into text.
func (s *Jobs) List(ctx context.Context, o ListOptions) ([]*JobRecord, string, error) {
	limit := o.Limit
	if limit <= 0 {
		limit = ListLimitDefault
	}
	limit = min(limit, ListLimitMax)
	if o.Tenant == "" && !o.AllTenants {
		return nil, "", errors.New("store: list: a tenant is required unless AllTenants is set")
	}
	where := `true`
	var args []any
	if o.Tenant != "" {
		args = append(args, o.Tenant)
		where += fmt.Sprintf(` AND tenant = $%d`, len(args))
	}
	if o.Status != "" {
		args = append(args, string(o.Status))
		where += fmt.Sprintf(` AND status = $%d`, len(args))
	}
	if o.After != "" {
		at, id, err := decodeCursor(o.After)
		if err != nil {
			return nil, "", err
		}
		args = append(args, at, id)
		where += fmt.Sprintf(` AND (created_at, id) < ($%d, $%d)`, len(args)-1, len(args))
	}
	args = append(args, limit+1)
	sql := `SELECT ` + listColumns + ` FROM jobs WHERE ` + where + fmt.Sprintf(` ORDER BY created_at DESC, id DESC LIMIT $%d`, len(args))
	if o.Tenant == "" && o.Status != "" {
		sql = listAllTenantsSQL(where, len(args))
	}
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, "", fmt.Errorf("store: list: %w", err)
	}
	recs, err := pgx.CollectRows(rows, scanJob)
	if err != nil {
		return nil, "", fmt.Errorf("store: list: %w", err)
	}
	next := ""
	if len(recs) > limit {
		recs = recs[:limit]
		last := recs[limit-1]
		next = encodeCursor(last.CreatedAt, last.ID)
	}
	if err := s.fillWaitingReasons(ctx, recs); err != nil {
		return nil, "", fmt.Errorf("store: list: %w", err)
	}
	return recs, next, nil
}

// listAllTenantsSQL lists the jobs of one status across tenants (where
// filters the jobs, $limit is the page size) as the newest page of each
// tenant (jobs_tenant_status_created_idx, index only, the tenants found by
// a loose scan), merged, then read in full. jobs_created_idx alone walked
// every newer job of another status: 6.4 s for a page of succeeded jobs
// behind 1,000,000 queued ones.
func listAllTenantsSQL(where string, limit int) string {
	return fmt.Sprintf(`WITH RECURSIVE t AS (
		(SELECT tenant FROM jobs ORDER BY tenant LIMIT 1)
		UNION ALL
		SELECT (SELECT j.tenant FROM jobs j WHERE j.tenant > t.tenant ORDER BY j.tenant LIMIT 1) FROM t
		WHERE t.tenant IS NOT NULL),
	page AS (SELECT k.tenant, k.id, k.created_at FROM t CROSS JOIN LATERAL (
			SELECT tenant, id, created_at FROM jobs WHERE tenant = t.tenant AND %s
			ORDER BY created_at DESC, id DESC LIMIT $%d) k
		WHERE t.tenant IS NOT NULL ORDER BY k.created_at DESC, k.id DESC LIMIT $%d)
	SELECT %s FROM page p JOIN jobs j ON j.tenant = p.tenant AND j.id = p.id
	ORDER BY j.created_at DESC, j.id DESC`, where, limit, limit, strings.Replace(prefixed("j", listColumns), "j.NULL", "NULL", 1))
}

// listColumns are the columns of a listed job: jobColumns but the body,
// NULL.
var listColumns = strings.Replace(jobColumns, " body,", " NULL::jsonb AS body,", 1)

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

// JobOutcome is a job's final state as a run's report reads it.
type JobOutcome struct {
	ID        string
	Status    llmq.Status
	UsedModel string
	// Latency is from the job's record to its end; 0 until it ends.
	Latency time.Duration
}

// JobOutcomes reads every job's final state, by id (a benchmark's run, in
// a database of its own).
func (s *Jobs) JobOutcomes(ctx context.Context) ([]JobOutcome, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, status, used_model,
		coalesce(extract(epoch FROM finished_at - created_at), 0)::float8 FROM jobs ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("store: job outcomes: %w", err)
	}
	var out []JobOutcome
	var (
		j      JobOutcome
		status string
		secs   float64
	)
	if _, err := pgx.ForEachRow(rows, []any{&j.ID, &status, &j.UsedModel, &secs}, func() error {
		j.Status, j.Latency = llmq.Status(status), 0
		if j.Status.Terminal() {
			j.Latency = time.Duration(secs * float64(time.Second))
		}
		out = append(out, j)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("store: job outcomes: %w", err)
	}
	return out, nil
}

// CountEnded counts the jobs of every tenant in a terminal status, exactly
// (a benchmark's run, in a database of its own).
func (s *Jobs) CountEnded(ctx context.Context) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM jobs
		WHERE status IN ('succeeded', 'failed', 'dead_lettered', 'expired', 'cancelled')`).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: count ended jobs: %w", err)
	}
	return n, nil
}

// JobTally is how many jobs of a set share a status, whether they
// succeeded on the batch lane and whether a fallback model answered.
type JobTally struct {
	Status   llmq.Status
	Batch    bool
	Fallback bool
	N        int
}

// TallyJobs counts the jobs ids of tenant by (status, succeeded on the
// batch lane, answered by a model other than the requested one), reading
// each by key (jobs_pkey).
func (s *Jobs) TallyJobs(ctx context.Context, tenant string, ids []string) ([]JobTally, error) {
	rows, err := s.pool.Query(ctx, `SELECT status, lane = 'batch' AND status = 'succeeded',
		used_model <> '' AND used_model <> requested_model, count(*)
		FROM jobs WHERE tenant = $2 AND id = ANY($1) GROUP BY 1, 2, 3`, ids, tenant)
	if err != nil {
		return nil, fmt.Errorf("store: tally jobs: %w", err)
	}
	var out []JobTally
	var (
		t      JobTally
		status string
	)
	if _, err := pgx.ForEachRow(rows, []any{&status, &t.Batch, &t.Fallback, &t.N}, func() error {
		t.Status = llmq.Status(status)
		out = append(out, t)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("store: tally jobs: %w", err)
	}
	return out, nil
}

// SucceededJob is a job that succeeded: when, after how long, on which
// lane.
type SucceededJob struct {
	ID         string
	Latency    time.Duration
	FinishedAt time.Time
	Lane       string
}

// SucceededJobs reads the jobs of ids (of any tenant) that succeeded, by
// id.
func (s *Jobs) SucceededJobs(ctx context.Context, ids []string) ([]SucceededJob, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, extract(epoch FROM finished_at - created_at)::float8, finished_at, lane FROM jobs
		WHERE id = ANY($1) AND status = 'succeeded' ORDER BY id`, ids)
	if err != nil {
		return nil, fmt.Errorf("store: succeeded jobs: %w", err)
	}
	var out []SucceededJob
	var (
		j    SucceededJob
		secs float64
	)
	if _, err := pgx.ForEachRow(rows, []any{&j.ID, &secs, &j.FinishedAt, &j.Lane}, func() error {
		j.Latency = time.Duration(secs * float64(time.Second))
		out = append(out, j)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("store: succeeded jobs: %w", err)
	}
	return out, nil
}
