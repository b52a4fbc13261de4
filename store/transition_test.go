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

// holder is the worker whose lease the seeded jobs carry.
const holder = "w0"

// transitionCase says how the table test drives one store operation.
type transitionCase struct {
	// batch is the status of the batch the seeded job belongs to (lane
	// batch); "" for none (lane live).
	batch string
	// deadline, when set, is the seeded job's deadline relative to now
	// (the sweeps act on deadlines; other jobs keep one far ahead).
	deadline time.Duration
	// lease reports whether the operation's lease check lets actor move a
	// job in status from whose lease (held by holder) is live or expired.
	lease func(from llmq.Status, actor string, live bool) bool
	// run performs the operation on job id as actor.
	run func(b *testBundle, id, actor string) error
	// quiet reports the statuses from which a refusal is answered without
	// an error (the job is already where the caller wants it). nil: none.
	quiet func(from llmq.Status) bool
	// bulk operations move whatever matches and never return an error for
	// a job they leave alone.
	bulk bool
}

func anyActor(llmq.Status, string, bool) bool { return true }

// leaseHolder: only the holder may act, whether its lease is live or not.
func leaseHolder(_ llmq.Status, actor string, _ bool) bool { return actor == holder }

func transitionCases(t *testing.T) map[string]transitionCase {
	single := func(run func(b *testBundle, id, actor string) error) func(*testBundle, string, string) error {
		return run
	}
	terminal := func(op func(b *testBundle, id string) error) transitionCase {
		return transitionCase{lease: anyActor, run: func(b *testBundle, id, _ string) error { return op(b, id) }}
	}
	ingest := func(in func(id string) store.BatchIngest) transitionCase {
		return transitionCase{batch: store.BatchInProgress, lease: anyActor, bulk: true,
			run: func(b *testBundle, id, _ string) error {
				_, err := b.store.IngestBatch(b.ctx, in(id))
				return err
			}}
	}
	inBatchLane := func(from llmq.Status) bool { return from == llmq.StatusQueued || from == llmq.StatusBatched }
	return map[string]transitionCase{
		"Claim": {
			// A queued job is not held; a leased one is claimed by its
			// holder, or by anyone once the lease has expired.
			lease: func(from llmq.Status, actor string, live bool) bool {
				return !from.Leased() || !live || actor == holder
			},
			run: single(func(b *testBundle, id, actor string) error {
				_, err := b.store.Claim(b.ctx, newJob(t, id), actor, time.Minute)
				return err
			}),
		},
		"Release": {lease: leaseHolder, run: func(b *testBundle, id, actor string) error {
			return b.store.Release(b.ctx, id, actor)
		}},
		"MarkRetrying": {lease: leaseHolder, run: func(b *testBundle, id, actor string) error {
			return b.store.MarkRetrying(b.ctx, id, actor, "rate_limited", "429")
		}},
		"StoreResult": {lease: anyActor, quiet: func(from llmq.Status) bool { return from == llmq.StatusSucceeded },
			run: func(b *testBundle, id, _ string) error {
				_, err := b.store.StoreResult(b.ctx, id, store.Result{Response: json.RawMessage(`{}`)})
				return err
			}},
		"MarkFailed": terminal(func(b *testBundle, id string) error {
			return b.store.MarkFailed(b.ctx, id, "bad_request", "400")
		}),
		"MarkDeadLettered": terminal(func(b *testBundle, id string) error {
			return b.store.MarkDeadLettered(b.ctx, id, "retries_exhausted", "gave up")
		}),
		"MarkExpired": terminal(func(b *testBundle, id string) error { return b.store.MarkExpired(b.ctx, id) }),
		"ExpireOverdue": {deadline: -time.Second, lease: anyActor, bulk: true, run: func(b *testBundle, _, _ string) error {
			_, err := b.store.ExpireOverdue(b.ctx)
			return err
		}},
		"Cancel": terminal(func(b *testBundle, id string) error {
			_, err := b.store.Cancel(b.ctx, "acme", id)
			return err
		}),
		"MarkBatched": {lease: anyActor, bulk: true, run: func(b *testBundle, id, _ string) error {
			_, err := b.store.MarkBatched(b.ctx, "lb-marked", "test", []string{id})
			return err
		}},
		"Unbatch": terminal(func(b *testBundle, id string) error { return b.store.Unbatch(b.ctx, id, "test") }),
		"RouteToBatch": {lease: leaseHolder, run: func(b *testBundle, id, actor string) error {
			_, err := b.store.RouteToBatch(b.ctx, id, actor, "batch: test")
			return err
		}},
		"RouteToBatch (accepted batch)": {batch: store.BatchInProgress, lease: leaseHolder, quiet: inBatchLane,
			run: func(b *testBundle, id, actor string) error {
				_, err := b.store.RouteToBatch(b.ctx, id, actor, "batch: test")
				return err
			}},
		"MarkBatchSubmitted": {batch: store.BatchSubmitting, lease: anyActor, bulk: true,
			run: func(b *testBundle, id, _ string) error {
				_, err := b.store.MarkBatchSubmitted(b.ctx, store.BatchSubmission{ID: batchOf(id), ProviderBatchID: "batch_" + id,
					Status: store.BatchValidating})
				return err
			}},
		"IngestBatch (result)": ingest(func(id string) store.BatchIngest {
			return store.BatchIngest{BatchID: batchOf(id), Results: []store.BatchResult{{JobID: id, Response: []byte(`{}`)}}}
		}),
		"IngestBatch (live)": ingest(func(id string) store.BatchIngest {
			return store.BatchIngest{BatchID: batchOf(id), Live: []store.BatchReturn{{JobID: id, Reason: "live: test"}}}
		}),
		"IngestBatch (dead letter)": ingest(func(id string) store.BatchIngest {
			return store.BatchIngest{BatchID: batchOf(id), DeadLetter: []store.BatchReturn{{JobID: id, Code: "c", Reason: "test"}}}
		}),
		"PullBack": {batch: store.BatchInProgress, deadline: time.Hour, lease: anyActor, bulk: true,
			run: func(b *testBundle, _, _ string) error {
				soon := b.clock.Now().Add(2 * time.Hour)
				_, err := b.store.PullBack(b.ctx, soon, soon, "live: test")
				return err
			}},
		"Requeue": {lease: anyActor, quiet: func(from llmq.Status) bool { return from == llmq.StatusQueued },
			run: func(b *testBundle, id, _ string) error {
				_, err := b.store.Requeue(b.ctx, id)
				return err
			}},
	}
}

func batchOf(id string) string { return "lb-" + id }

// seeded is one job the table test seeds.
type seeded struct {
	id    string
	from  llmq.Status
	actor string
	live  bool
}

// seed records the jobs, all in one round trip: each in its status, leased
// by holder (live for another minute, or expired a second ago), last
// updated an hour ago, and in a batch of status c.batch when set.
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
		batch.Queue(`UPDATE jobs SET status = $2, lease_owner = $3, lease_expires_at = $4,
			batch_id = $5, lane = $6, deadline = coalesce($7, deadline), updated_at = $8 WHERE id = $1`,
			j.id, string(j.from), holder, expires, batchID, lane, deadline, now.Add(-time.Hour))
	}
	require.NoError(t, b.store.Pool().SendBatch(b.ctx, batch).Close())
}

// insertSQL records a job as newJob would, but without the store (the
// table test seeds straight into the table).
const insertSQL = `INSERT INTO jobs (id, tenant, status, priority, requested_model, body, created_at, updated_at,
	deadline, fallback_models)
VALUES ($1, 'acme', 'queued', 'high', 'big',
	'{"model":"big","messages":[{"role":"user","content":"hi"}],"max_tokens":64}', now(), now(),
	'2027-01-02T03:04:05Z', '{small}')`

// TestEveryTransitionObeysTheTable runs every status change the store
// makes (store.Transitions) on a job seeded in each status, as the lease
// holder and as another worker, with the lease live and expired. A job
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

	// One database for all operations: each acts on its own jobs (by id or
	// batch); of the sweeps, ExpireOverdue finds only its jobs overdue and
	// PullBack only its own near their deadline in the batch lane.
	b := setup(t)
	for _, tr := range store.Transitions() {
		c := cases[tr.Op]
		t.Run(tr.Op, func(t *testing.T) {
			t.Parallel()
			variants := []struct {
				actor string
				live  bool
			}{{holder, true}, {"w1", true}, {"w1", false}}
			var jobs []seeded
			for _, from := range llmq.Statuses {
				for _, v := range variants {
					id := fmt.Sprintf("%s.%s.%s.%t", strings.NewReplacer(" (", ".", ")", "", " ", "").Replace(tr.Op), from, v.actor, v.live)
					jobs = append(jobs, seeded{id, from, v.actor, v.live})
				}
			}
			c.seed(t, b, jobs)
			for _, j := range jobs {
				id, from := j.id, j.from
				{
					err := c.run(b, id, j.actor)
					rec, gerr := b.store.GetByID(b.ctx, id)
					require.NoError(t, gerr)
					declared := slices.Contains(tr.From, from)
					want := declared && c.lease(from, j.actor, j.live)
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
					case declared:
						require.ErrorIs(t, err, store.ErrLeased, id)
					case tr.To == llmq.StatusRunning && from == llmq.StatusBatched:
						require.ErrorIs(t, err, store.ErrBatched, id)
					default:
						var ite *store.IllegalTransitionError
						if !errors.As(err, &ite) {
							// RouteToBatch: a job of the live lane the
							// caller does not hold.
							require.ErrorIs(t, err, store.ErrLeased, id)
							require.False(t, from.Terminal(), id)
							continue
						}
						require.Equal(t, from, ite.From, id)
						require.Equal(t, from.Terminal(), errors.Is(err, store.ErrTerminal), id)
					}
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
