package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// JobDoneChannel is the Postgres notification channel on which every
// statement that moves a job to a terminal status (succeeded, failed,
// dead_lettered, expired, cancelled) announces it, in the same
// transaction: the payload is the job's Key.String(), tenant/id. A
// notification is sent only if the transaction commits, and a transaction
// that ends several jobs sends one per job. The gateway's waiting callers
// are woken by it (see ListenJobsDone).
const JobDoneChannel = "llmq_job_done"

// notifyDone turns update, an UPDATE of jobs that moves rows to a terminal
// status and ends with its RETURNING list, into one statement that also
// sends each changed row's key on JobDoneChannel and writes the result
// events of the changed rows that have a route (jobs.reply) into the
// notifications outbox, as one batch: a job without a route costs the
// statement nothing more than the filter (docs/design/notifications.md). q
// qualifies the jobs columns as the UPDATE needs (unaliased or aliasJ);
// the statement returns cols, the names of the RETURNING list.
func notifyDone(update, q, cols string) string {
	return `WITH done AS (` + update + `, ` + q + `tenant || '/' || ` + q + `id AS done_key, ` + q + `tenant AS done_tenant, ` +
		q + `id AS done_id, ` + q + `status AS done_status, ` + q + `reply AS done_reply, ` + q + `updated_at AS done_at),
	outbox AS (INSERT INTO notification_batches (created_at, event_ids, tenants, job_ids, statuses, replies)
		SELECT max(done_at), array_agg(gen_random_uuid()), array_agg(done_tenant), array_agg(done_id), array_agg(done_status),
			array_agg(done_reply) FROM done WHERE done_reply IS NOT NULL HAVING count(*) > 0)
	SELECT ` + cols + ` FROM done, pg_notify('` + JobDoneChannel + `', done.done_key) AS notified`
}

// unaliased and aliasJ qualify the jobs columns of a statement that does
// not alias the table, and of one that aliases it j.
const (
	unaliased = ``
	aliasJ    = `j.`
)

// JobQueuedChannel is the Postgres notification channel on which the
// store announces the models of the jobs it recorded as queued (the API's
// outbox, a worker's ingest, Insert), after the commit that recorded
// them: one notification per model, the models of the recordings
// committed while one announcement was sent going in the next
// (announce.go). The workers' claims are woken by it (see
// ListenJobsQueued); jobs recorded by other means are found by their read
// of the queued models.
const JobQueuedChannel = "llmq_job_queued"

// ListenJobsDone holds one connection of its own (outside the pool, with
// the pool's settings) listening on JobDoneChannel. Once it listens it
// calls listening (the caller re-reads what it waits for: a job that ended
// before is not announced again), then done with the key of every job that
// ends, from this goroutine, in order. It returns when ctx ends (ctx's
// error) or the connection fails; the caller reconnects by calling it
// again, and listening tells it to re-read.
func (s *Jobs) ListenJobsDone(ctx context.Context, listening func(), done func(Key)) error {
	return s.listen(ctx, JobDoneChannel, listening, func(payload string) {
		// Another sender's payload that is not a key wakes nobody.
		if k, ok := ParseKey(payload); ok {
			done(k)
		}
	})
}

// ListenJobsQueued is ListenJobsDone for JobQueuedChannel: queued is
// called with the model of every statement's newly queued jobs.
func (s *Queue) ListenJobsQueued(ctx context.Context, listening func(), queued func(model string)) error {
	return s.listen(ctx, JobQueuedChannel, listening, queued)
}

// listen holds a connection of its own listening on channel (see
// ListenJobsDone).
func (s *base) listen(ctx context.Context, channel string, listening func(), heard func(payload string)) error {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("store: listen: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx)) //nolint:errcheck
	if _, err := conn.Exec(ctx, `LISTEN `+pgx.Identifier{channel}.Sanitize()); err != nil {
		return fmt.Errorf("store: listen: %w", err)
	}
	listening()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("store: listen: %w", err)
		}
		heard(n.Payload)
	}
}
