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

// Notifications is the outbox of result events: the events of the jobs
// with a route that one statement ended, written by that statement as one
// row of notification_batches (notifyDone), claimed by notifiers under a
// lease (FOR UPDATE SKIP LOCKED) and settled in one transaction: the
// delivered events leave, each failed one becomes a row of notifications,
// retried there until delivered, or kept dead when its retry period
// passed (docs/design/notifications.md).
type Notifications struct{ s *Store }

// Notifications is the store's notifications outbox.
func (s *Store) Notifications() *Notifications { return &Notifications{s: s} }

// Notification is one event of the outbox, with its job when claimed.
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
	// batch is the notification_batches row Claim took the event from (0:
	// a row of notifications).
	batch int64 `db:"-"`
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

// Claim takes due notifications that no other notifier holds, counts an
// attempt on each and holds it until now + lease (claimed_until), in
// committed statements that read what each event needs of its job: half
// of limit in single rows (retried or replayed events), then batches in
// order until they hold the rest of limit or more, then single rows up to
// limit, so neither kind waits behind the other
// (docs/design/notifications.md). A statement that fails after others
// claimed returns their events with its error.
func (ns *Notifications) Claim(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]*Notification, error) {
	half := max(1, limit/2)
	claimed, err := ns.claim(ctx, claimRowsSQL, now, lease, min(half, limit))
	if err != nil || len(claimed) >= limit {
		return claimed, err
	}
	rowsFull := len(claimed) == half
	batched, err := ns.claim(ctx, claimBatchesSQL, now, lease, limit-len(claimed))
	claimed = append(claimed, batched...)
	if err != nil || len(claimed) >= limit || !rowsFull {
		return claimed, err
	}
	rows, err := ns.claim(ctx, claimRowsSQL, now, lease, limit-len(claimed))
	return append(claimed, rows...), err
}

// claimBatchesSQL claims batches in order until they hold $3 events (the
// last may pass it), and returns their events in order. It counts the
// batches it needs (k) from the due ones before it locks any, and then
// locks k: locking up to $3 rows to claim a few would write a lock on
// each (on up to 256 batches to claim about 5 while a backlog drains).
// The update finds its rows by their keys as an array, as claimRowsSQL
// does.
const claimBatchesSQL = `WITH due AS (` + dueBatches + ` LIMIT $3),
	k AS (SELECT count(*) AS k FROM (SELECT sum(n) OVER (ORDER BY id) - n AS before FROM due) x WHERE before < $3),
	c AS (` + dueBatches + ` LIMIT (SELECT k FROM k) FOR UPDATE SKIP LOCKED),
	t AS (SELECT id FROM (SELECT id, sum(n) OVER (ORDER BY id) - n AS before FROM c) x WHERE before < $3),
	b AS (UPDATE notification_batches b SET attempts = b.attempts + 1, claimed_until = $2
		WHERE b.id = ANY(ARRAY(SELECT id FROM t))
		RETURNING b.id, b.created_at, b.attempts, b.event_ids, b.tenants, b.job_ids, b.statuses, b.replies),
	u AS (SELECT b.id AS batch, x.event_id::text, x.tenant, x.job_id, x.status, x.reply, b.created_at,
			b.created_at AS retry_since, b.created_at AS next_attempt_at, b.attempts, ''::text AS last_error, x.ord
		FROM b, unnest(b.event_ids, b.tenants, b.job_ids, b.statuses, b.replies) WITH ORDINALITY
			AS x(event_id, tenant, job_id, status, reply, ord))
	` + claimedSelect + ` ORDER BY u.batch, u.ord`

// dueBatches reads the batches due at $1 that no notifier holds, in order,
// with their counts of events.
const dueBatches = `SELECT id, cardinality(event_ids) AS n FROM notification_batches
		WHERE created_at <= $1 AND (claimed_until IS NULL OR claimed_until <= $1) ORDER BY id`

// claimRowsSQL claims up to $3 single rows. The update finds the claimed
// rows by their keys as an array: joined to the claim instead, the
// planner hashes the whole table (dead rows included) on every claim
// while it holds up to some tens of thousands of rows.
const claimRowsSQL = `WITH c AS (
		SELECT event_id FROM notifications WHERE dead_at IS NULL AND next_attempt_at <= $1
			AND (claimed_until IS NULL OR claimed_until <= $1)
		ORDER BY next_attempt_at LIMIT $3 FOR UPDATE SKIP LOCKED),
	u AS (UPDATE notifications n SET attempts = n.attempts + 1, claimed_until = $2
		WHERE n.event_id = ANY(ARRAY(SELECT event_id FROM c))
		RETURNING 0::bigint AS batch, n.event_id::text, n.tenant, n.job_id, n.status, n.reply, n.created_at, n.retry_since,
			n.next_attempt_at, n.attempts, n.last_error)
	` + claimedSelect

// claimedSelect reads the claimed events (u) and what their result events
// need of their jobs.
const claimedSelect = `SELECT u.batch, u.event_id, u.tenant, u.job_id, u.status, u.reply, u.created_at, u.retry_since,
		u.next_attempt_at, u.attempts, u.last_error,
		j.id IS NOT NULL, coalesce(j.used_model, ''), j.result, coalesce(j.error_code, ''),
		coalesce(j.error_message, ''), coalesce(j.error_status, 0), coalesce(j.attempts, 0),
		coalesce(j.prompt_tokens, 0), coalesce(j.completion_tokens, 0), coalesce(j.cost_usd, 0),
		j.metadata, coalesce(j.created_at, u.created_at), j.started_at, j.finished_at
	FROM u LEFT JOIN jobs j ON j.tenant = u.tenant AND j.id = u.job_id`

func (ns *Notifications) claim(ctx context.Context, sql string, now time.Time, lease time.Duration, limit int) ([]*Notification, error) {
	rows, err := ns.s.pool.Query(ctx, sql, now, now.Add(lease), limit)
	if err != nil {
		return nil, fmt.Errorf("store: claim notifications: %w", err)
	}
	defer rows.Close()
	var claimed []*Notification
	for rows.Next() {
		n, j := &Notification{}, &notifiedJob{}
		var found bool
		if err := rows.Scan(&n.batch, &n.EventID, &n.Tenant, &n.JobID, &n.Status, &n.Reply, &n.CreatedAt, &n.RetrySince,
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

// Failure is why a claimed notification was not delivered, and what
// follows: its next attempt, or (Dead) its end as a dead letter
// (NotificationUndeliverable) at At.
type Failure struct {
	At    time.Time
	Error string
	Next  time.Time
	Dead  bool
}

// Settle records what became of the notifications claimed, in one
// transaction: those without a failure (by event id) were delivered and
// leave the outbox; each failed one keeps its error and its next
// attempt, or ends dead. A claimed batch leaves with its delivered
// events, and each of its failed ones becomes a row of its own with the
// same event id (a batch settled twice, its lease passed, writes them
// once).
func (ns *Notifications) Settle(ctx context.Context, claimed []*Notification, failed map[string]Failure) error {
	var delivered []string
	var batches []int64
	seen := map[int64]bool{}
	q := &pgx.Batch{}
	for _, n := range claimed {
		if n.batch != 0 && !seen[n.batch] {
			seen[n.batch] = true
			batches = append(batches, n.batch)
		}
		f, bad := failed[n.EventID]
		switch {
		case !bad && n.batch == 0:
			delivered = append(delivered, n.EventID)
		case !bad:
		case n.batch != 0:
			var deadAt *time.Time
			reason, next := "", f.Next
			if f.Dead {
				deadAt, reason, next = &f.At, NotificationUndeliverable, f.At
			}
			q.Queue(`INSERT INTO notifications (event_id, tenant, job_id, status, reply, created_at, retry_since, next_attempt_at,
				attempts, last_error, dead_at, dead_reason) VALUES ($1::uuid, $2, $3, $4, $5, $6, $6, $7, $8, $9, $10, $11)
				ON CONFLICT (event_id) DO NOTHING`,
				n.EventID, n.Tenant, n.JobID, n.Status, n.Reply, n.CreatedAt, next, n.Attempts, f.Error, deadAt, reason)
		case f.Dead:
			q.Queue(`UPDATE notifications SET last_error = $2, dead_at = $3, dead_reason = $4 WHERE event_id = $1::uuid`,
				n.EventID, f.Error, f.At, NotificationUndeliverable)
		default:
			q.Queue(`UPDATE notifications SET last_error = $2, next_attempt_at = $3, claimed_until = NULL WHERE event_id = $1::uuid`,
				n.EventID, f.Error, f.Next)
		}
	}
	if len(delivered) > 0 {
		q.Queue(`DELETE FROM notifications WHERE event_id = ANY($1::uuid[])`, delivered)
	}
	if len(batches) > 0 {
		q.Queue(`DELETE FROM notification_batches WHERE id = ANY($1)`, batches)
	}
	var err error
	switch q.Len() {
	case 0:
		return nil
	case 1: // one statement: atomic on its own
		err = ns.s.pool.SendBatch(ctx, q).Close()
	default:
		err = pgx.BeginFunc(ctx, ns.s.pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, q).Close() })
	}
	if err != nil {
		return fmt.Errorf("store: settle notifications: %w", err)
	}
	return nil
}

// replaySQL makes the rows its WHERE selects due at $3, their retry
// period restarted from then.
const replaySQL = `UPDATE notifications SET dead_at = NULL, dead_reason = '',
	retry_since = $3, next_attempt_at = $3, claimed_until = NULL`

// Replay sends the dead (or pending) notification of tenant ("": any, an
// operator) with eventID again: due at now, its retry period restarted
// (an event of a batch, never tried, is due already and returned as it
// is). The job is not touched. ErrNotificationNotFound when there is none
// (a delivered notification is gone).
func (ns *Notifications) Replay(ctx context.Context, tenant, eventID string, now time.Time) (*Notification, error) {
	rows, err := ns.s.pool.Query(ctx, replaySQL+` WHERE ($1 = '' OR tenant = $1) AND event_id::text = $2
		RETURNING `+notificationColumns, tenant, eventID, now)
	if err != nil {
		return nil, fmt.Errorf("store: replay notification: %w", err)
	}
	n, err := pgx.CollectOneRow(rows, pgx.RowToAddrOfStructByName[Notification])
	if errors.Is(err, pgx.ErrNoRows) {
		// An event of a batch was never tried: it is due already.
		rows, err = ns.s.pool.Query(ctx, `SELECT `+notificationColumns+` FROM `+batchedEvents+` n
			WHERE ($1 = '' OR tenant = $1) AND event_id::text = $2`, tenant, eventID)
		if err != nil {
			return nil, fmt.Errorf("store: replay notification: %w", err)
		}
		n, err = pgx.CollectOneRow(rows, pgx.RowToAddrOfStructByName[Notification])
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("store: replay notification %s/%s: %w", tenant, eventID, ErrNotificationNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: replay notification: %w", err)
	}
	return n, nil
}

// ReplayDead makes every dead notification of tenant ("": all) due again
// at now, as Replay does one: of the job jobID when it is set. It returns
// how many it replayed (0 when none was dead). A webhook endpoint back
// after a longer outage than the retry period has its events sent again
// in one call.
func (ns *Notifications) ReplayDead(ctx context.Context, tenant, jobID string, now time.Time) (int64, error) {
	tag, err := ns.s.pool.Exec(ctx, replaySQL+` WHERE dead_at IS NOT NULL AND ($1 = '' OR tenant = $1)
		AND ($2 = '' OR job_id = $2)`, tenant, jobID, now)
	if err != nil {
		return 0, fmt.Errorf("store: replay dead notifications: %w", err)
	}
	return tag.RowsAffected(), nil
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

// outboxColumns are the columns of notifications, in order, and
// batchedEvents the events of notification_batches as rows of
// notifications: never tried, so neither held nor dead.
const (
	outboxColumns = `event_id, tenant, job_id, status, reply, created_at, retry_since, next_attempt_at, claimed_until,
		attempts, last_error, dead_at, dead_reason`
	batchedEvents = `(SELECT x.event_id, x.tenant, x.job_id, x.status, x.reply, b.created_at, b.created_at AS retry_since,
			b.created_at AS next_attempt_at, NULL::timestamptz AS claimed_until, b.attempts, ''::text AS last_error,
			NULL::timestamptz AS dead_at, ''::text AS dead_reason
		FROM notification_batches b, unnest(b.event_ids, b.tenants, b.job_ids, b.statuses, b.replies)
			AS x(event_id, tenant, job_id, status, reply))`
)

// List returns the notifications f selects, newest first: the rows of
// notifications and the events of batches.
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
	rows, err := ns.s.pool.Query(ctx, `SELECT `+notificationColumns+` FROM (SELECT `+outboxColumns+` FROM notifications
		UNION ALL SELECT * FROM `+batchedEvents+` b) n WHERE `+where+
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
		(SELECT count(*) FROM notifications WHERE dead_at IS NULL) +
			(SELECT coalesce(sum(cardinality(event_ids)), 0) FROM notification_batches),
		(SELECT count(*) FROM notifications WHERE dead_at IS NOT NULL),
		least((SELECT min(created_at) FROM notifications WHERE dead_at IS NULL),
			(SELECT min(created_at) FROM notification_batches))`).
		Scan(&b.Pending, &b.Dead, &oldest)
	if err != nil {
		return b, fmt.Errorf("store: notification backlog: %w", err)
	}
	if oldest != nil {
		b.Oldest = *oldest
	}
	return b, nil
}
