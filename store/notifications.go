package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/llmq/llmq"
)

// NotificationUndeliverable is the dead reason of a notification whose
// retry period passed without a delivery. Its job keeps its status.
const NotificationUndeliverable = "notification_undeliverable"

// ErrNotificationNotFound: the tenant has no notification with that event
// id.
var ErrNotificationNotFound = errors.New("store: notification not found")

// Notifications is the outbox of result events: a row per job with a
// route that ended, written by the statement that ended it (notifyDone),
// claimed by notifiers under a lease (FOR UPDATE SKIP LOCKED), deleted
// once delivered, or kept dead when its retry period passed
// (docs/design/notifications.md).
type Notifications struct{ s *Store }

// Notifications is the store's notifications outbox.
func (s *Store) Notifications() *Notifications { return &Notifications{s: s} }

// Notification is one row of the outbox, with its job when claimed.
type Notification struct {
	EventID string `db:"event_id"`
	Tenant  string `db:"tenant"`
	JobID   string `db:"job_id"`
	// Status is the job's terminal status when the row was written.
	Status      llmq.Status `db:"status"`
	Reply       llmq.Reply  `db:"reply"`
	CreatedAt   time.Time   `db:"created_at"`
	RetrySince  time.Time   `db:"retry_since"`
	NextAttempt time.Time   `db:"next_attempt_at"`
	// Attempts counts the claims of the row (deliveries tried).
	Attempts   int        `db:"attempts"`
	LastError  string     `db:"last_error"`
	DeadAt     *time.Time `db:"dead_at"`
	DeadReason string     `db:"dead_reason"`

	// job is what the result event needs of the job, read by Claim; nil
	// otherwise, or when retention deleted the job first.
	job *notifiedJob `db:"-"`
}

const notificationColumns = `event_id::text, tenant, job_id, status, reply, created_at, retry_since, next_attempt_at,
	attempts, last_error, dead_at, dead_reason`

// Event is the result event of n, whose job Claim read (without it, when
// retention deleted the job first, the event carries its ids and status
// only).
func (n *Notification) Event() llmq.ResultEvent {
	e := llmq.ResultEvent{
		Type: llmq.ResultEventType, Version: llmq.ResultEventVersion, EventID: n.EventID,
		JobID: n.JobID, Tenant: n.Tenant, Status: n.Status, CorrelationID: n.Reply.CorrelationID,
	}
	j := n.job
	if j == nil {
		return e
	}
	e.Model, e.CostUSD, e.Attempts = j.usedModel, j.costUSD, j.attempts
	e.Usage = llmq.ResultUsage{PromptTokens: j.promptTokens, CompletionTokens: j.completionTokens,
		TotalTokens: j.promptTokens + j.completionTokens}
	if len(j.metadata) > 0 {
		e.Metadata = j.metadata
	}
	e.CreatedAt, e.StartedAt, e.FinishedAt = j.createdAt, j.startedAt, j.finishedAt
	if n.Status == llmq.StatusSucceeded {
		e.Response = j.result
	} else {
		e.Error = &llmq.ResultError{Code: j.errorCode, Message: j.errorMessage, Status: j.errorStatus}
	}
	return e
}

// Claim takes up to limit due notifications (not dead, next attempt at
// or before now) that no other notifier holds, counts an attempt on each
// and holds it until now + lease (claimed_until), in one committed
// statement, a heap-only update (nothing it changes is indexed): a
// notifier that dies before it marks them hands them on when the lease
// passes. The same statement reads what each one's result event needs of
// its job (docs/design/notifications.md, Cost). The update finds the
// claimed rows by their keys as an array: joined to the claim instead,
// the planner hashes the whole table (dead rows included) on every claim
// while it holds up to some tens of thousands of rows.
func (ns *Notifications) Claim(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]*Notification, error) {
	rows, err := ns.s.pool.Query(ctx, `WITH c AS (
		SELECT event_id FROM notifications WHERE dead_at IS NULL AND next_attempt_at <= $1
			AND (claimed_until IS NULL OR claimed_until <= $1)
		ORDER BY next_attempt_at LIMIT $3 FOR UPDATE SKIP LOCKED),
	u AS (UPDATE notifications n SET attempts = n.attempts + 1, claimed_until = $2
		WHERE n.event_id = ANY(ARRAY(SELECT event_id FROM c))
		RETURNING n.event_id::text, n.tenant, n.job_id, n.status, n.reply, n.created_at, n.retry_since,
			n.next_attempt_at, n.attempts, n.last_error)
	SELECT u.*, j.id IS NOT NULL, coalesce(j.used_model, ''), j.result, coalesce(j.error_code, ''),
		coalesce(j.error_message, ''), coalesce(j.error_status, 0), coalesce(j.attempts, 0),
		coalesce(j.prompt_tokens, 0), coalesce(j.completion_tokens, 0), coalesce(j.cost_usd, 0),
		j.metadata, coalesce(j.created_at, u.created_at), j.started_at, j.finished_at
	FROM u LEFT JOIN jobs j ON j.tenant = u.tenant AND j.id = u.job_id`, now, now.Add(lease), limit)
	if err != nil {
		return nil, fmt.Errorf("store: claim notifications: %w", err)
	}
	defer rows.Close()
	var claimed []*Notification
	for rows.Next() {
		n, j := &Notification{}, &notifiedJob{}
		var found bool
		if err := rows.Scan(&n.EventID, &n.Tenant, &n.JobID, &n.Status, &n.Reply, &n.CreatedAt, &n.RetrySince,
			&n.NextAttempt, &n.Attempts, &n.LastError, &found, &j.usedModel, &j.result, &j.errorCode,
			&j.errorMessage, &j.errorStatus, &j.attempts, &j.promptTokens, &j.completionTokens, &j.costUSD,
			&j.metadata, &j.createdAt, &j.startedAt, &j.finishedAt); err != nil {
			return nil, fmt.Errorf("store: claim notifications: %w", err)
		}
		if found {
			n.job = j
		}
		claimed = append(claimed, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: claim notifications: %w", err)
	}
	return claimed, nil
}

// notifiedJob is what a result event carries of its job, as Claim reads
// it.
type notifiedJob struct {
	usedModel                      string
	result                         []byte
	errorCode, errorMessage        string
	errorStatus, attempts          int
	promptTokens, completionTokens int
	costUSD                        float64
	metadata                       map[string]string
	createdAt                      time.Time
	startedAt, finishedAt          *time.Time
}

// Delivered deletes the delivered notifications eventIDs, in one
// statement.
func (ns *Notifications) Delivered(ctx context.Context, eventIDs []string) error {
	if len(eventIDs) == 0 {
		return nil
	}
	if _, err := ns.s.pool.Exec(ctx, `DELETE FROM notifications WHERE event_id = ANY($1::uuid[])`, eventIDs); err != nil {
		return fmt.Errorf("store: notification delivered: %w", err)
	}
	return nil
}

// Failed records a failed delivery of notification eventID: its error,
// and either its next attempt (next) or, when dead, its end as a dead
// letter (NotificationUndeliverable) at at.
func (ns *Notifications) Failed(ctx context.Context, eventID string, at time.Time, msg string, next time.Time, dead bool) error {
	var err error
	if dead {
		_, err = ns.s.pool.Exec(ctx, `UPDATE notifications SET last_error = $2, dead_at = $3, dead_reason = $4
			WHERE event_id = $1::uuid`, eventID, msg, at, NotificationUndeliverable)
	} else {
		_, err = ns.s.pool.Exec(ctx, `UPDATE notifications SET last_error = $2, next_attempt_at = $3, claimed_until = NULL
			WHERE event_id = $1::uuid`, eventID, msg, next)
	}
	if err != nil {
		return fmt.Errorf("store: notification failed: %w", err)
	}
	return nil
}

// Replay sends the dead (or pending) notification of tenant ("": any, an
// operator) with eventID again: due at now, its retry period restarted.
// The job is not touched. ErrNotificationNotFound when there is none (a
// delivered notification is gone).
func (ns *Notifications) Replay(ctx context.Context, tenant, eventID string, now time.Time) (*Notification, error) {
	rows, err := ns.s.pool.Query(ctx, `UPDATE notifications SET dead_at = NULL, dead_reason = '',
		retry_since = $3, next_attempt_at = $3, claimed_until = NULL
	WHERE ($1 = '' OR tenant = $1) AND event_id::text = $2 RETURNING `+notificationColumns, tenant, eventID, now)
	if err != nil {
		return nil, fmt.Errorf("store: replay notification: %w", err)
	}
	n, err := pgx.CollectOneRow(rows, pgx.RowToAddrOfStructByName[Notification])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("store: replay notification %s/%s: %w", tenant, eventID, ErrNotificationNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: replay notification: %w", err)
	}
	return n, nil
}

// NotificationFilter selects notifications for List: of a tenant ("":
// all) and a state ("": any).
type NotificationFilter struct {
	Tenant string
	// State is NotificationPending, NotificationDead or "" (both).
	State string
	// JobID, when set, keeps the notifications of that job.
	JobID string
	// Limit caps the rows (0: 100).
	Limit int
}

// Notification states, as NotificationFilter.State reads them.
const (
	NotificationPending = "pending"
	NotificationDead    = "dead"
)

// List returns the notifications f selects, newest first.
func (ns *Notifications) List(ctx context.Context, f NotificationFilter) ([]*Notification, error) {
	where, args := "TRUE", []any{}
	if f.Tenant != "" {
		args = append(args, f.Tenant)
		where += fmt.Sprintf(" AND tenant = $%d", len(args))
	}
	if f.JobID != "" {
		args = append(args, f.JobID)
		where += fmt.Sprintf(" AND job_id = $%d", len(args))
	}
	switch f.State {
	case "":
	case NotificationPending:
		where += " AND dead_at IS NULL"
	case NotificationDead:
		where += " AND dead_at IS NOT NULL"
	default:
		return nil, fmt.Errorf("store: list notifications: unknown state %q (pending, dead)", f.State)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	args = append(args, limit)
	rows, err := ns.s.pool.Query(ctx, `SELECT `+notificationColumns+` FROM notifications WHERE `+where+
		fmt.Sprintf(` ORDER BY created_at DESC, event_id LIMIT $%d`, len(args)), args...)
	if err != nil {
		return nil, fmt.Errorf("store: list notifications: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToAddrOfStructByName[Notification])
	if err != nil {
		return nil, fmt.Errorf("store: list notifications: %w", err)
	}
	return out, nil
}

// NotificationBacklog is what the outbox holds undelivered.
type NotificationBacklog struct {
	// Pending counts the notifications neither delivered nor dead.
	Pending int64
	// Dead counts the dead ones.
	Dead int64
	// Oldest is the creation time of the oldest pending one (zero: none).
	Oldest time.Time
}

// Backlog reads the outbox's undelivered notifications, for metrics.
func (ns *Notifications) Backlog(ctx context.Context) (NotificationBacklog, error) {
	var b NotificationBacklog
	var oldest *time.Time
	err := ns.s.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM notifications WHERE dead_at IS NULL),
		(SELECT count(*) FROM notifications WHERE dead_at IS NOT NULL),
		(SELECT min(created_at) FROM notifications WHERE dead_at IS NULL)`).
		Scan(&b.Pending, &b.Dead, &oldest)
	if err != nil {
		return b, fmt.Errorf("store: notification backlog: %w", err)
	}
	if oldest != nil {
		b.Oldest = *oldest
	}
	return b, nil
}
