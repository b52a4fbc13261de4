package store

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// announceSQL sends one notification on JobQueuedChannel per model ($1),
// in a transaction of its own committed without waiting for its WAL to
// reach the disk: an announcement is a hint, and one that a crash loses
// costs the workers a claim round, at their next read of the queued
// models.
const announceSQL = `SELECT set_config('synchronous_commit', 'off', true), pg_notify('` + JobQueuedChannel + `', m)
	FROM unnest($1::text[]) AS m`

// announceTimeout bounds one announcement.
const announceTimeout = 5 * time.Second

// announcer announces on JobQueuedChannel the models of the jobs this
// process recorded as queued, after their commit, as the group committer
// batches writes: one statement in flight, taking every model recorded
// since the one before. A transaction that notifies takes at its commit a
// lock every such transaction of the server takes, through its WAL flush:
// sent by a trigger in each recording transaction, the API's commits
// waited on each other's. Announced after, `llmq bench --only throughput`
// posts 5 to 11% more jobs a second (docs/design/queue-of-record.md,
// "Waking the claims").
type announcer struct {
	pool *pgxpool.Pool

	mu      sync.Mutex
	pending map[string]bool
	// sending: a goroutine sends the pending models (send); it ends when
	// none are left.
	sending bool
	sends   sync.WaitGroup
}

func newAnnouncer(pool *pgxpool.Pool) *announcer {
	return &announcer{pool: pool, pending: map[string]bool{}}
}

// announce announces models, whose jobs a committed transaction recorded.
// It never blocks on the database: a statement in flight is followed by
// one that takes these models.
func (a *announcer) announce(models ...string) {
	if len(models) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, m := range models {
		a.pending[m] = true
	}
	if a.sending {
		return
	}
	a.sending = true
	a.sends.Add(1)
	go a.send()
}

// send sends the pending models until none are left. A statement that
// fails loses its models' announcement: the workers read the models with
// queued jobs every 500 ms, and when their listening connection comes
// back.
func (a *announcer) send() {
	defer a.sends.Done()
	for {
		a.mu.Lock()
		if len(a.pending) == 0 {
			a.sending = false
			a.mu.Unlock()
			return
		}
		models := slices.Sorted(maps.Keys(a.pending))
		clear(a.pending)
		a.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), announceTimeout)
		_, _ = a.pool.Exec(ctx, announceSQL, models)
		cancel()
	}
}

// wait returns once no announcement is in flight.
func (a *announcer) wait() { a.sends.Wait() }
