package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// holderToken is the lease token of the seeded jobs: the holder acts with
// it, a stale holder with the one before.
const holderToken = 5

// transitionCase says how the table test drives one store operation.
type transitionCase struct {
	// batch is the status of the batch the seeded job belongs to (lane
	// batch); "" for none (lane live).
	batch string
	// deadline, when set, is the seeded job's deadline relative to now
	// (the sweeps act on deadlines; other jobs keep one far ahead).
	deadline time.Duration
	// ownDB runs the case in a database of its own (a sweep over leases,
	// which every other case's jobs carry).
	ownDB bool
	// lease reports whether the operation's lease check lets the caller
	// (the holder, or a stale holder) move a job whose lease is live or
	// expired.
	lease func(holder, live bool) bool
	// fenced operations answer a refusal on a job that is not terminal
	// with ErrLeaseLost.
	fenced bool
	// run performs the operation on job id with lease token token.
	run func(b *testBundle, id string, token int64) error
	// quiet reports the statuses from which a refusal is answered without
	// an error (the job is already where the caller wants it). nil: none.
	quiet func(from llmq.Status) bool
	// bulk operations move whatever matches and never return an error for
	// a job they leave alone.
	bulk bool
}

func anyone(bool, bool) bool { return true }

// theHolder: only the current holder may act, whether its lease is live or
// not (a lease that expired but was not reaped is still its).
func theHolder(holder, _ bool) bool { return holder }

func transitionCases(t *testing.T) map[string]transitionCase {
	lease := func(id string, token int64) store.Lease {
		return store.Lease{Key: acme(id), Token: token}
	}
	fenced := func(run func(b *testBundle, l store.Lease) error) transitionCase {
		return transitionCase{lease: theHolder, fenced: true, run: func(b *testBundle, id string, token int64) error {
			return run(b, lease(id, token))
		}}
	}
	unfenced := func(op func(b *testBundle, id string) error) transitionCase {
		return transitionCase{lease: anyone, run: func(b *testBundle, id string, _ int64) error { return op(b, id) }}
	}
	ingest := func(in func(id string) store.BatchIngest) transitionCase {
		return transitionCase{batch: store.BatchInProgress, lease: anyone, bulk: true,
			run: func(b *testBundle, id string, _ int64) error {
				_, err := b.store.Batches().IngestBatch(b.ctx, in(id))
				return err
			}}
	}
	held := fenced(func(b *testBundle, l store.Lease) error {
		d := newLetter(l.ID, l.Tenant, "retries_exhausted")
		d.LeaseToken = l.Token
		_, _, err := b.store.DeadLetters().RecordDeadLetter(b.ctx, d)
		return err
	})
	held.quiet = func(from llmq.Status) bool { return from == llmq.StatusDeadLettered }
	return map[string]transitionCase{
		// The claim takes the seeded job by its model, which is its id.
		"Claim": {lease: anyone, bulk: true, run: func(b *testBundle, id string, _ int64) error {
			_, err := b.store.Queue().Claim(b.ctx, store.ClaimRequest{Model: id, Owner: "w1", Lease: time.Minute, Limit: 1})
			return err
		}},
		"MarkCalling": fenced(func(b *testBundle, l store.Lease) error {
			_, err := b.store.Queue().MarkCalling(b.ctx, l, store.PolicyState{})
			return err
		}),
		"MarkRetrying": fenced(func(b *testBundle, l store.Lease) error {
			return b.store.Queue().MarkRetrying(b.ctx, l, store.PolicyState{Retries: 1}, "rate_limited", "429")
		}),
		"Release": fenced(func(b *testBundle, l store.Lease) error { return b.store.Queue().Release(b.ctx, l) }),
		"MarkFailed": fenced(func(b *testBundle, l store.Lease) error {
			return b.store.Queue().MarkFailed(b.ctx, l, 400, "bad_request", "400")
		}),
		"MarkExpired":             fenced(func(b *testBundle, l store.Lease) error { return b.store.Queue().MarkExpired(b.ctx, l, "too late") }),
		"RecordDeadLetter (held)": held,
		"StoreResult": {lease: anyone, quiet: func(from llmq.Status) bool { return from == llmq.StatusSucceeded },
			run: func(b *testBundle, id string, _ int64) error {
				_, err := b.store.Queue().StoreResult(b.ctx, acme(id), store.Result{Response: json.RawMessage(`{}`)})
				return err
			}},
		"ReapExpired": {ownDB: true, lease: func(_, live bool) bool { return !live }, bulk: true,
			run: func(b *testBundle, _ string, _ int64) error {
				_, err := b.store.Queue().ReapExpired(b.ctx)
				return err
			}},
		"MarkDeadLettered": unfenced(func(b *testBundle, id string) error {
			return b.store.DeadLetters().MarkDeadLettered(b.ctx, acme(id), "delivery_limit", "gave up")
		}),
		"ExpireOverdue": {deadline: -time.Second, lease: anyone, bulk: true, run: func(b *testBundle, _ string, _ int64) error {
			_, err := b.store.Queue().ExpireOverdue(b.ctx)
			return err
		}},
		"Cancel": unfenced(func(b *testBundle, id string) error {
			_, err := b.store.Jobs().Cancel(b.ctx, "acme", id)
			return err
		}),
		"MarkBatchSubmitted": {batch: store.BatchSubmitting, lease: anyone, bulk: true,
			run: func(b *testBundle, id string, _ int64) error {
				_, err := b.store.Batches().MarkBatchSubmitted(b.ctx, store.BatchSubmission{ID: batchOf(id), ProviderBatchID: "batch_" + id,
					Status: store.BatchValidating})
				return err
			}},
		"IngestBatch (result)": ingest(func(id string) store.BatchIngest {
			return store.BatchIngest{BatchID: batchOf(id), Results: []store.BatchResult{{Job: acme(id), Response: []byte(`{}`)}}}
		}),
		"IngestBatch (live)": ingest(func(id string) store.BatchIngest {
			return store.BatchIngest{BatchID: batchOf(id), Live: []store.BatchReturn{{Job: acme(id), Reason: "live: test"}}}
		}),
		"IngestBatch (dead letter)": ingest(func(id string) store.BatchIngest {
			return store.BatchIngest{BatchID: batchOf(id), DeadLetter: []store.BatchReturn{{Job: acme(id), Code: "c", Reason: "test"}}}
		}),
		"PullBack": {batch: store.BatchInProgress, deadline: time.Hour, lease: anyone, bulk: true,
			run: func(b *testBundle, _ string, _ int64) error {
				soon := b.clock.Now().Add(2 * time.Hour)
				_, err := b.store.Batches().PullBack(b.ctx, soon, soon, "live: test")
				return err
			}},
		"Requeue": {lease: anyone, quiet: func(from llmq.Status) bool { return from == llmq.StatusQueued },
			run: func(b *testBundle, id string, _ int64) error {
				_, err := b.store.DeadLetters().Requeue(b.ctx, "acme", id)
				return err
			}},
	}
}

func batchOf(id string) string { return "lb-" + id }

// seeded is one job the table test seeds.
type seeded struct {
	id     string
	from   llmq.Status
	holder bool
	live   bool
}

// seed records the jobs, all in one round trip: each in its status, of
// model id, leased with token holderToken (live for another minute, or
// expired a second ago), last updated an hour ago, and in a batch of
// status c.batch when set.
func (c transitionCase) seed(t *testing.T, b *testBundle, jobs []seeded) {
	t.Helper()
	now := b.clock.Now()
	batch := &pgx.Batch{}
	for _, j := range jobs {
		batch.Queue(insertSQL, j.id)
		expires := now.Add(-time.Second)
		if j.live {
			expires = now.Add(time.Minute)
		}
		batchID, lane := "", store.LaneLive
		if c.batch != "" {
			batchID, lane = batchOf(j.id), store.LaneBatch
			batch.Queue(`INSERT INTO batches (id, model, status, job_count, created_at, updated_at)
				VALUES ($1, 'big', $2, 1, $3, $3)`, batchID, c.batch, now)
		}
		var deadline *time.Time
		if c.deadline != 0 {
			d := now.Add(c.deadline)
			deadline = &d
		}
		batch.Queue(`UPDATE jobs SET status = $2, lease_owner = 'w0', lease_expires_at = $3, lease_token = $4,
			batch_id = $5, lane = $6, deadline = coalesce($7, deadline), updated_at = $8 WHERE id = $1`,
			j.id, string(j.from), expires, holderToken, batchID, lane, deadline, now.Add(-time.Hour))
	}
	require.NoError(t, b.store.Pool().SendBatch(b.ctx, batch).Close())
}

// insertSQL records a job as newJob would, but without the store (the
// table test seeds straight into the table), of model $1 (its id).
const insertSQL = `INSERT INTO jobs (id, tenant, status, priority, requested_model, body, created_at, updated_at,
	deadline, fallback_models, sched_key)
VALUES ($1, 'acme', 'queued', 'high', $1,
	'{"model":"big","messages":[{"role":"user","content":"hi"}],"max_tokens":64}', now(), now(),
	'2027-01-02T03:04:05Z', '{small}', now())`

// TestEveryTransitionObeysTheTable runs every status change the store
// makes (store.Transitions) on a job seeded in each status, as the lease
// holder and as a stale holder, with the lease live and expired. A job
// moves iff its status is one the operation declares and the lease check
// lets the caller act; every declared move is legal by llmq.CanTransition
// (the replay of a dead letter is the one declared exception); refusals
// say why; and every move the table allows is made by some operation.
func TestEveryTransitionObeysTheTable(t *testing.T) {
	t.Parallel()
	cases := transitionCases(t)
	made := map[[2]llmq.Status]bool{}
	var ops []string
	for _, tr := range store.Transitions() {
		ops = append(ops, tr.Op)
		for _, from := range tr.From {
			if tr.Replay {
				require.Equal(t, [2]llmq.Status{llmq.StatusDeadLettered, llmq.StatusQueued}, [2]llmq.Status{from, tr.To}, tr.Op)
				require.False(t, llmq.CanTransition(from, tr.To))
				continue
			}
			require.True(t, llmq.CanTransition(from, tr.To), "%s: %s → %s", tr.Op, from, tr.To)
			made[[2]llmq.Status{from, tr.To}] = true
		}
	}
	require.ElementsMatch(t, ops, keys(cases), "every declared transition has a case, and no case is undeclared")
	for _, from := range llmq.Statuses {
		for _, to := range llmq.Statuses {
			require.Equal(t, llmq.CanTransition(from, to), made[[2]llmq.Status{from, to}],
				"%s → %s: the table allows it iff some operation makes it", from, to)
		}
	}

	// One database for all operations but the lease sweep: each acts on
	// its own jobs (by id, model or batch); of the sweeps, ExpireOverdue
	// finds only its jobs overdue and PullBack only its own near their
	// deadline in the batch lane.
	shared := setup(t)
	for _, tr := range store.Transitions() {
		c := cases[tr.Op]
		t.Run(tr.Op, func(t *testing.T) {
			t.Parallel()
			b := shared
			if c.ownDB {
				b = setup(t)
			}
			variants := []struct{ holder, live bool }{{true, true}, {false, true}, {true, false}}
			var jobs []seeded
			for _, from := range llmq.Statuses {
				for _, v := range variants {
					id := fmt.Sprintf("%s.%s.%t.%t", strings.NewReplacer(" (", ".", ")", "", " ", "").Replace(tr.Op), from, v.holder, v.live)
					jobs = append(jobs, seeded{id, from, v.holder, v.live})
				}
			}
			c.seed(t, b, jobs)
			for _, j := range jobs {
				id, from := j.id, j.from
				token := int64(holderToken)
				if !j.holder {
					token--
				}
				err := c.run(b, id, token)
				rec := b.get(t, id)
				declared := slices.Contains(tr.From, from)
				want := declared && c.lease(j.holder, j.live)
				moved := rec.UpdatedAt.Equal(b.clock.Now())
				require.Equal(t, want, moved, "%s: moved", id)
				if moved {
					require.NoError(t, err, id)
					require.Equal(t, tr.To, rec.Status, id)
					continue
				}
				require.Equal(t, from, rec.Status, "%s: a refused move changes nothing", id)
				switch {
				case c.bulk || (c.quiet != nil && c.quiet(from)):
					require.NoError(t, err, id)
				case c.fenced && !from.Terminal():
					require.ErrorIs(t, err, store.ErrLeaseLost, id)
				default:
					var ite *store.IllegalTransitionError
					require.ErrorAs(t, err, &ite, id)
					require.Equal(t, from, ite.From, id)
					require.Equal(t, from.Terminal(), errors.Is(err, store.ErrTerminal), id)
				}
			}
		})
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
