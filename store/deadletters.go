package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/llmq/llmq"
)

// DeadLetters is the dead letters (table dead_letters) and the job moves a
// letter makes: dead-lettered when recorded, queued again when replayed.
// It is reached by Store.DeadLetters.
type DeadLetters struct{ *base }

var (
	// ErrDeadLetterNotFound: no dead letter with that id (within that
	// tenant, where one is given).
	ErrDeadLetterNotFound = errors.New("store: dead letter not found")
	// ErrEmptyFilter: a purge named no filter. Purging every letter needs
	// DeadLetterFilter.All.
	ErrEmptyFilter = errors.New("store: purge needs an explicit filter")
)

// DeadLetter is one row of the dead_letters table: a message llmq gave up
// on, the original bytes and why. It is what the dead-letter service, the
// HTTP API and `llmq dlq` show; its JSON form (MarshalJSON) is the API's.
type DeadLetter struct {
	ID int64 `db:"id"`
	// LetterKey makes recording idempotent: "job:<tenant>/<id>:<n>" or
	// "msg:<sha256>:<n>", n counting the earlier replayed letters of the
	// same job or message.
	LetterKey string `db:"letter_key"`
	// JobID is "" for a poison message whose id could not be read.
	JobID  string `db:"job_id"`
	Tenant string `db:"tenant"`
	// Reason is the reason class (dlq.Reason).
	Reason string `db:"reason"`
	// LastError is the last error met (a validation error, the last
	// upstream error).
	LastError string `db:"last_error"`
	// Attempts is how many upstream calls were made.
	Attempts int `db:"attempts"`
	// Model is the model of the last attempt; may be empty.
	Model string `db:"model"`
	// Message and MessageKey are the original message body and Kafka key,
	// byte for byte.
	Message    []byte            `db:"message"`
	MessageKey []byte            `db:"message_key"`
	Headers    map[string]string `db:"headers"`
	// Source is where the message came from (topic/partition/offset or
	// queue/delivery-tag).
	Source string `db:"source"`
	// Destination is the DLQ topic or queue the letter is published to.
	Destination string `db:"destination"`
	// CreatedAt is when the job was dead-lettered.
	CreatedAt time.Time `db:"created_at"`
	// PublishedAt is when the DLQ publish was confirmed; nil until then.
	PublishedAt *time.Time `db:"published_at"`
	// ReplayedAt is when a replay began; nil when never replayed.
	ReplayedAt  *time.Time `db:"replayed_at"`
	ReplayCount int        `db:"replay_count"`
	// ReplayPublishedAt is when the replayed message was confirmed on the
	// main queue; nil while the replay is unfinished.
	ReplayPublishedAt *time.Time `db:"replay_published_at"`
}

// deadLetterJSON is a dead letter as the API shows it.
type deadLetterJSON struct {
	ID                int64             `json:"id"`
	JobID             string            `json:"job_id"`
	Tenant            string            `json:"tenant"`
	Reason            string            `json:"reason"`
	LastError         string            `json:"last_error"`
	Attempts          int               `json:"attempts"`
	Model             string            `json:"model"`
	Source            string            `json:"source"`
	Destination       string            `json:"destination"`
	Headers           map[string]string `json:"headers"`
	Message           json.RawMessage   `json:"message,omitempty"`
	MessageBase64     string            `json:"message_base64,omitempty"`
	CreatedAt         time.Time         `json:"created_at"`
	PublishedAt       *time.Time        `json:"published_at"`
	ReplayedAt        *time.Time        `json:"replayed_at"`
	ReplayPublishedAt *time.Time        `json:"replay_published_at"`
	ReplayCount       int               `json:"replay_count"`
}

// MarshalJSON renders the letter as the HTTP API and `llmq dlq --json`
// show it: snake_case fields, the message inlined when it is JSON and
// base64-encoded as message_base64 otherwise, without the letter key and
// the Kafka key.
func (d DeadLetter) MarshalJSON() ([]byte, error) {
	out := deadLetterJSON{
		ID: d.ID, JobID: d.JobID, Tenant: d.Tenant, Reason: d.Reason, LastError: d.LastError,
		Attempts: d.Attempts, Model: d.Model, Source: d.Source, Destination: d.Destination,
		Headers: d.Headers, CreatedAt: d.CreatedAt, PublishedAt: d.PublishedAt, ReplayedAt: d.ReplayedAt,
		ReplayPublishedAt: d.ReplayPublishedAt, ReplayCount: d.ReplayCount,
	}
	if out.Headers == nil {
		out.Headers = map[string]string{}
	}
	if json.Valid(d.Message) {
		out.Message = d.Message
	} else {
		out.MessageBase64 = base64.StdEncoding.EncodeToString(d.Message)
	}
	return json.Marshal(out)
}

const deadLetterColumns = `id, letter_key, job_id, tenant, reason, last_error, attempts, model, message,
	message_key, headers, source, destination, created_at, published_at, replayed_at, replay_count,
	replay_published_at`

// NewDeadLetter is what RecordDeadLetter writes.
type NewDeadLetter struct {
	// KeyBase identifies the job or message: "job:<tenant>/<id>" or
	// "msg:<hash>". Required; the store appends ":<n>".
	KeyBase string
	JobID   string
	Tenant  string
	// LeaseToken, when not 0, is the lease of the worker that holds job
	// (Tenant, JobID) and dead-letters it: the job moves to dead_lettered
	// in the same transaction as the letter is recorded, fenced to that
	// lease (ErrLeaseLost when it is no longer the job's).
	LeaseToken int64
	Reason     string
	LastError  string
	Attempts   int
	Model      string
	// Message is required.
	Message     []byte
	MessageKey  []byte
	Headers     map[string]string
	Source      string
	Destination string
	// CreatedAt is when the job was dead-lettered; zero means the store's
	// clock.
	CreatedAt time.Time
}

func scanDeadLetter(row pgx.CollectableRow) (*DeadLetter, error) {
	d, err := pgx.RowToAddrOfStructByName[DeadLetter](row)
	if err != nil {
		return nil, err
	}
	if d.Headers == nil {
		d.Headers = map[string]string{}
	}
	return d, nil
}

func (s *DeadLetters) queryDeadLetter(ctx context.Context, sql string, args ...any) (*DeadLetter, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return collectDeadLetter(rows)
}

// letterKeySQL computes the letter key of $1 (the key base), $2 (the job
// id) and $3 (the tenant): the base plus the number of its letters already
// replayed.
const letterKeySQL = `$1 || ':' || (SELECT count(*) FROM dead_letters
	WHERE tenant = $3 AND job_id = $2 AND starts_with(letter_key, $1 || ':') AND replayed_at IS NOT NULL)`

// RecordDeadLetter inserts a dead letter once per letter key: when the same
// job (or poison message) is recorded again before it was replayed, as after
// a redelivery, the existing row is returned with created=false. With a
// LeaseToken, the job's holder dead-letters it: the job moves to
// dead_lettered in the same transaction, or nothing is recorded and
// ErrLeaseLost (another holder has it) or an *IllegalTransitionError (it
// finished otherwise) is returned.
func (s *DeadLetters) RecordDeadLetter(ctx context.Context, d NewDeadLetter) (rec *DeadLetter, created bool, err error) {
	if d.KeyBase == "" || d.Message == nil || d.Reason == "" {
		return nil, false, fmt.Errorf("store: record dead letter: %w: KeyBase, Reason and Message are required", ErrInvalidJob)
	}
	at := d.CreatedAt.UTC().Truncate(time.Microsecond)
	if d.CreatedAt.IsZero() {
		at = s.clock()
	}
	// A dead letter may come of any bytes a broker carries: its text is
	// made what Postgres can hold (the raw message is bytea).
	d.KeyBase, d.JobID, d.LastError, d.Model = pgText(d.KeyBase), pgText(d.JobID), pgText(d.LastError), pgText(d.Model)
	d.Tenant, d.Source, d.Destination = pgText(d.Tenant), pgText(d.Source), pgText(d.Destination)
	headers := pgTextMap(d.Headers)
	if headers == nil {
		headers = map[string]string{}
	}
	key := d.MessageKey
	if key == nil {
		key = []byte{}
	}
	tenant := d.Tenant
	if tenant == "" {
		tenant = llmq.DefaultTenant
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("store: record dead letter %q: %w", d.KeyBase, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	if d.LeaseToken != 0 {
		if err := s.deadLetterHeld(ctx, tx, Lease{Key: Key{Tenant: tenant, ID: d.JobID}, Token: d.LeaseToken}, d, at); err != nil {
			return nil, false, err
		}
	}
	rows, err := tx.Query(ctx, `INSERT INTO dead_letters (letter_key, job_id, tenant, reason,
		last_error, attempts, model, message, message_key, headers, source, destination, created_at)
	VALUES (`+letterKeySQL+`, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
	ON CONFLICT (letter_key) DO NOTHING RETURNING `+deadLetterColumns,
		d.KeyBase, d.JobID, tenant, d.Reason, d.LastError, d.Attempts, d.Model, d.Message, key,
		headers, d.Source, d.Destination, at)
	if err == nil {
		rec, err = collectDeadLetter(rows)
	}
	if err != nil {
		return nil, false, dataError("record dead letter "+strconv.Quote(d.KeyBase), err)
	}
	created = rec != nil
	if !created {
		rows, err := tx.Query(ctx, `SELECT `+deadLetterColumns+` FROM dead_letters WHERE letter_key = `+letterKeySQL,
			d.KeyBase, d.JobID, tenant)
		if err == nil {
			rec, err = collectDeadLetter(rows)
		}
		if err == nil && rec == nil {
			err = ErrDeadLetterNotFound // replayed between the two statements
		}
		if err != nil {
			return nil, false, fmt.Errorf("store: record dead letter %q: %w", d.KeyBase, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, false, fmt.Errorf("store: record dead letter %q: %w", d.KeyBase, err)
	}
	return rec, created, nil
}

// deadLetterHeld moves the job l holds to dead_lettered inside tx, fenced
// to l; a job already dead_lettered (this letter recorded before) is left
// as it is.
func (s *DeadLetters) deadLetterHeld(ctx context.Context, tx pgx.Tx, l Lease, d NewDeadLetter, at time.Time) error {
	tag, err := tx.Exec(ctx, notifyDone(`UPDATE jobs SET status = `+tDeadLetter.to+`, error_code = $4, error_message = $5,
		finished_at = $6, updated_at = $6, lease_expires_at = NULL, phase = ''
	WHERE tenant = $1 AND id = $2 AND lease_token = $3 AND status `+tDeadLetter.in+` RETURNING id`, unaliased, `id`),
		l.Tenant, l.ID, l.Token, d.Reason, d.LastError, at)
	if err != nil {
		return dataError("dead-letter "+strconv.Quote(l.String()), err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var status llmq.Status
	if err := tx.QueryRow(ctx, `SELECT status FROM jobs WHERE tenant = $1 AND id = $2`, l.Tenant, l.ID).Scan(&status); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("store: dead-letter %q: %w", l.String(), ErrNotFound)
		}
		return fmt.Errorf("store: dead-letter %q: %w", l.String(), err)
	}
	switch {
	case status == llmq.StatusDeadLettered:
		return nil
	case status.Terminal():
		return &IllegalTransitionError{Key: l.Key, From: status, To: llmq.StatusDeadLettered}
	}
	return fmt.Errorf("store: dead-letter %q: %w", l.String(), ErrLeaseLost)
}

func collectDeadLetter(rows pgx.Rows) (*DeadLetter, error) {
	d, err := pgx.CollectOneRow(rows, scanDeadLetter)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return d, err
}

// MarkDeadLetterPublished records that the DLQ publish of letter id was
// confirmed. It reports whether this call set it (false when it was already
// set).
func (s *DeadLetters) MarkDeadLetterPublished(ctx context.Context, id int64) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE dead_letters SET published_at = $2 WHERE id = $1 AND published_at IS NULL`,
		id, s.clock())
	if err != nil {
		return false, fmt.Errorf("store: mark dead letter %d published: %w", id, err)
	}
	if tag.RowsAffected() == 1 {
		return true, nil
	}
	if _, err := s.GetDeadLetter(ctx, "", id); err != nil {
		return false, fmt.Errorf("store: mark dead letter %d published: %w", id, err)
	}
	return false, nil
}

// GetDeadLetter returns letter id of tenant ("" = any tenant);
// ErrDeadLetterNotFound when there is none.
func (s *DeadLetters) GetDeadLetter(ctx context.Context, tenant string, id int64) (*DeadLetter, error) {
	rec, err := s.queryDeadLetter(ctx, `SELECT `+deadLetterColumns+` FROM dead_letters
		WHERE id = $1 AND ($2 = '' OR tenant = $2)`, id, tenant)
	if err != nil {
		return nil, fmt.Errorf("store: get dead letter %d: %w", id, err)
	}
	if rec == nil {
		return nil, fmt.Errorf("store: get dead letter %d: %w", id, ErrDeadLetterNotFound)
	}
	return rec, nil
}

// DeadLetterFilter selects dead letters; zero fields do not filter.
type DeadLetterFilter struct {
	// IDs selects these letters.
	IDs []int64
	// JobID selects the letters of one job (of Tenant, when set).
	JobID string
	// Reason selects one reason class.
	Reason string
	// Tenant selects one tenant.
	Tenant string
	// Since and Until bound created_at: Since <= created_at < Until.
	Since, Until time.Time
	// All states that every letter is meant when nothing else filters; a
	// purge without it and without another field is refused.
	All bool
}

// Empty reports whether f selects every letter without saying so (All).
func (f DeadLetterFilter) Empty() bool {
	return len(f.IDs) == 0 && f.JobID == "" && f.Reason == "" && f.Tenant == "" &&
		f.Since.IsZero() && f.Until.IsZero()
}

// where renders f as " AND ..." conditions, appending its arguments.
func (f DeadLetterFilter) where(args []any) (string, []any) {
	sql := ""
	add := func(cond string, v any) {
		args = append(args, v)
		sql += fmt.Sprintf(" AND "+cond, len(args))
	}
	if len(f.IDs) > 0 {
		add("id = ANY($%d)", f.IDs)
	}
	if f.JobID != "" {
		add("job_id = $%d", f.JobID)
	}
	if f.Reason != "" {
		add("reason = $%d", f.Reason)
	}
	if f.Tenant != "" {
		add("tenant = $%d", f.Tenant)
	}
	if !f.Since.IsZero() {
		add("created_at >= $%d", f.Since)
	}
	if !f.Until.IsZero() {
		add("created_at < $%d", f.Until)
	}
	return sql, args
}

// DeadLetterListOptions select a page of dead letters, newest first.
type DeadLetterListOptions struct {
	DeadLetterFilter
	// Limit is the page size: 0 means ListLimitDefault, capped at
	// ListLimitMax.
	Limit int
	// After is the cursor returned with the previous page; "" starts at the
	// newest letter.
	After string
}

// ListDeadLetters returns one page of letters, newest first (created_at,
// then id, descending), and the cursor of the next page ("" after the last).
func (s *DeadLetters) ListDeadLetters(ctx context.Context, o DeadLetterListOptions) ([]*DeadLetter, string, error) {
	limit := o.Limit
	if limit <= 0 {
		limit = ListLimitDefault
	}
	limit = min(limit, ListLimitMax)
	cond, args := o.DeadLetterFilter.where(nil)
	if o.After != "" {
		at, id, err := decodeCursor(o.After)
		if err != nil {
			return nil, "", err
		}
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil {
			return nil, "", fmt.Errorf("%w: %q", ErrBadCursor, o.After)
		}
		args = append(args, at, n)
		cond += fmt.Sprintf(` AND (created_at, id) < ($%d, $%d)`, len(args)-1, len(args))
	}
	args = append(args, limit+1)
	rows, err := s.pool.Query(ctx, `SELECT `+deadLetterColumns+` FROM dead_letters WHERE true`+cond+
		fmt.Sprintf(` ORDER BY created_at DESC, id DESC LIMIT $%d`, len(args)), args...)
	if err != nil {
		return nil, "", fmt.Errorf("store: list dead letters: %w", err)
	}
	recs, err := pgx.CollectRows(rows, scanDeadLetter)
	if err != nil {
		return nil, "", fmt.Errorf("store: list dead letters: %w", err)
	}
	if len(recs) <= limit {
		return recs, "", nil
	}
	recs = recs[:limit]
	last := recs[limit-1]
	return recs, encodeCursor(last.CreatedAt, strconv.FormatInt(last.ID, 10)), nil
}

// PurgeDeadLetters deletes the letters f selects and returns how many. An
// empty filter without All is refused with ErrEmptyFilter.
func (s *DeadLetters) PurgeDeadLetters(ctx context.Context, f DeadLetterFilter) (int64, error) {
	if f.Empty() && !f.All {
		return 0, fmt.Errorf("store: purge dead letters: %w", ErrEmptyFilter)
	}
	cond, args := f.where(nil)
	tag, err := s.pool.Exec(ctx, `DELETE FROM dead_letters WHERE true`+cond, args...)
	if err != nil {
		return 0, fmt.Errorf("store: purge dead letters: %w", err)
	}
	return tag.RowsAffected(), nil
}

// UnpublishedDeadLetters returns up to limit letters (oldest first) whose
// DLQ publish was not confirmed and that were created before olderThan, for
// the repair sweep.
func (s *DeadLetters) UnpublishedDeadLetters(ctx context.Context, olderThan time.Time, limit int) ([]*DeadLetter, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+deadLetterColumns+` FROM dead_letters
		WHERE published_at IS NULL AND created_at < $1 ORDER BY created_at, id LIMIT $2`, olderThan, limit)
	if err != nil {
		return nil, fmt.Errorf("store: list unpublished dead letters: %w", err)
	}
	recs, err := pgx.CollectRows(rows, scanDeadLetter)
	if err != nil {
		return nil, fmt.Errorf("store: list unpublished dead letters: %w", err)
	}
	return recs, nil
}

// BeginReplay starts the replay of letter id of tenant ("" = any tenant):
// it sets replayed_at and counts the replay, once. It returns the letter and
// begun=true for the one call that started the replay; any later call gets
// begun=false and the letter unchanged, so replaying twice gives one new
// attempt. ErrDeadLetterNotFound when the tenant has no such letter.
func (s *DeadLetters) BeginReplay(ctx context.Context, tenant string, id int64) (rec *DeadLetter, begun bool, err error) {
	rec, err = s.queryDeadLetter(ctx, `UPDATE dead_letters SET replayed_at = $3, replay_count = replay_count + 1
		WHERE id = $1 AND ($2 = '' OR tenant = $2) AND replayed_at IS NULL RETURNING `+deadLetterColumns,
		id, tenant, s.clock())
	if err != nil {
		return nil, false, fmt.Errorf("store: begin replay of dead letter %d: %w", id, err)
	}
	if rec != nil {
		return rec, true, nil
	}
	rec, err = s.GetDeadLetter(ctx, tenant, id)
	if err != nil {
		return nil, false, fmt.Errorf("store: begin replay: %w", err)
	}
	return rec, false, nil
}

// MarkReplayPublished records that the replayed message of letter id was
// confirmed on the main queue. It reports whether this call set it.
func (s *DeadLetters) MarkReplayPublished(ctx context.Context, id int64) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE dead_letters SET replay_published_at = $2
		WHERE id = $1 AND replayed_at IS NOT NULL AND replay_published_at IS NULL`, id, s.clock())
	if err != nil {
		return false, fmt.Errorf("store: mark replay of dead letter %d published: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// UnfinishedReplays returns up to limit letters (oldest replay first) whose
// replay began before olderThan but whose republish was never confirmed, for
// the repair sweep.
func (s *DeadLetters) UnfinishedReplays(ctx context.Context, olderThan time.Time, limit int) ([]*DeadLetter, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+deadLetterColumns+` FROM dead_letters
		WHERE replayed_at IS NOT NULL AND replay_published_at IS NULL AND replayed_at < $1
		ORDER BY replayed_at, id LIMIT $2`, olderThan, limit)
	if err != nil {
		return nil, fmt.Errorf("store: list unfinished replays: %w", err)
	}
	recs, err := pgx.CollectRows(rows, scanDeadLetter)
	if err != nil {
		return nil, fmt.Errorf("store: list unfinished replays: %w", err)
	}
	return recs, nil
}

// LaneReasonReplayed is the lane_reason of a job requeued by a replay.
const LaneReasonReplayed = "replayed"

// Job returns the job a letter names (as Jobs.Get), ErrNotFound when
// the tenant has none.
func (s *DeadLetters) Job(ctx context.Context, tenant, id string) (*JobRecord, error) {
	return s.getJob(ctx, tenant, id)
}

// Requeue moves the dead-lettered job id of tenant back to queued for a
// replay: attempts and the policy state reset to 0, error, result, lease,
// phase, started and finished times cleared, lane live. This is the one exit from a
// terminal state (see llmq.Status); it is deliberately not a transition of
// llmq.CanTransition. It keeps its place in the claim order (an early one:
// it has waited). A job already queued is returned unchanged (a replay
// resumed by the repair sweep); any other state is an
// *IllegalTransitionError, a missing job ErrNotFound.
func (s *DeadLetters) Requeue(ctx context.Context, tenant, id string) (*JobRecord, error) {
	rec, err := s.queryJob(ctx, `UPDATE jobs SET status = `+tRequeue.to+`, attempts = 0, retries = 0,
		model_index = 0, rate_limited = 0, free_attempts = 0, error_code = '', error_message = '', result = NULL, used_model = '',
		prompt_tokens = 0, completion_tokens = 0, cost_usd = 0, started_at = NULL, finished_at = NULL,
		lease_owner = '', lease_expires_at = NULL, phase = '', batch_id = '', lane = 'live',
		lane_reason = '`+LaneReasonReplayed+`', updated_at = $3
	WHERE tenant = $1 AND id = $2 AND status `+tRequeue.in+` RETURNING `+jobColumns, tenant, id, s.clock())
	if err != nil {
		return nil, fmt.Errorf("store: requeue %q: %w", id, err)
	}
	if rec != nil {
		return rec, nil
	}
	rec, err = s.getJob(ctx, tenant, id)
	if err != nil {
		return nil, fmt.Errorf("store: requeue: %w", err)
	}
	if rec.Status == llmq.StatusQueued {
		return rec, nil
	}
	return rec, &IllegalTransitionError{Key: Key{Tenant: tenant, ID: id}, From: rec.Status, To: llmq.StatusQueued}
}

// DeadLetterCount is the letters of one reason.
type DeadLetterCount struct {
	Reason string
	Count  int64
	// NotReplayed counts the letters no one replayed yet.
	NotReplayed int64
	// NewestAt is when the newest was dead-lettered.
	NewestAt *time.Time
}

// CountDeadLetters counts the letters of tenant ("" = every tenant)
// dead-lettered in [since, until) (zero: unbounded) by reason, in no
// order; a reason without letters is absent. It reads
// dead_letters_tenant_created_idx or dead_letters_created_idx.
func (s *DeadLetters) CountDeadLetters(ctx context.Context, tenant string, since, until time.Time) ([]DeadLetterCount, error) {
	var lo, hi *time.Time
	if !since.IsZero() {
		lo = &since
	}
	if !until.IsZero() {
		hi = &until
	}
	rows, err := s.pool.Query(ctx, `SELECT reason, count(*), count(*) FILTER (WHERE replayed_at IS NULL), max(created_at)
		FROM dead_letters
		WHERE ($1 = '' OR tenant = $1) AND ($2::timestamptz IS NULL OR created_at >= $2)
			AND ($3::timestamptz IS NULL OR created_at < $3)
		GROUP BY reason`, tenant, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("store: count dead letters: %w", err)
	}
	var out []DeadLetterCount
	var c DeadLetterCount
	if _, err := pgx.ForEachRow(rows, []any{&c.Reason, &c.Count, &c.NotReplayed, &c.NewestAt}, func() error {
		out = append(out, c)
		c.NewestAt = nil
		return nil
	}); err != nil {
		return nil, fmt.Errorf("store: count dead letters: %w", err)
	}
	return out, nil
}

// CountDeadLetteredJobs counts the jobs of ids (of any tenant) with at
// least one letter of reason.
func (s *Jobs) CountDeadLetteredJobs(ctx context.Context, ids []string, reason string) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(DISTINCT job_id) FROM dead_letters WHERE job_id = ANY($1) AND reason = $2`,
		ids, reason).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: count dead-lettered jobs: %w", err)
	}
	return n, nil
}
