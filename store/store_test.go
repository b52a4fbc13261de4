package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type testBundle struct {
	ctx   context.Context
	store *store.Store
	clock *clockwork.FakeClock
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	ctx := context.Background()
	s, err := store.Open(ctx, storetest.NewDB(t), store.WithClock(clock))
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return &testBundle{ctx: ctx, store: s, clock: clock}
}

func newJob(t *testing.T, id string) *llmq.Job {
	t.Helper()
	j, err := llmq.Decode([]byte(fmt.Sprintf(`{"id":%q,"tenant":"acme","priority":"high",
		"deadline":"2027-01-02T03:04:05Z","fallback_models":["small"],"metadata":{"k":"v"},
		"body":{"model":"big","messages":[{"role":"user","content":"hi"}],"max_tokens":64}}`, id)), llmq.DecodeOptions{})
	require.NoError(t, err)
	return j
}

func TestInsertAndGet(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := newJob(t, "job-1")
	j.Project = "support"
	created, err := b.store.Jobs().Insert(b.ctx, j)
	require.NoError(t, err)
	require.True(t, created)
	created, err = b.store.Jobs().Insert(b.ctx, j)
	require.NoError(t, err)
	require.False(t, created)

	rec, err := b.store.Jobs().Get(b.ctx, "acme", "job-1")
	require.NoError(t, err)
	require.Equal(t, llmq.StatusQueued, rec.Status)
	require.Equal(t, llmq.PriorityHigh, rec.Priority)
	require.Equal(t, "big", rec.RequestedModel)
	require.Equal(t, []string{"small"}, rec.FallbackModels)
	require.Equal(t, map[string]string{"k": "v"}, rec.Metadata)
	require.Equal(t, b.clock.Now(), rec.CreatedAt.UTC())
	require.Equal(t, b.clock.Now(), rec.SchedKey.UTC(), "a high job sorts at its creation")
	require.Nil(t, rec.Result)
	require.Nil(t, rec.StartedAt)
	require.Equal(t, store.LaneLive, rec.Lane)
	require.True(t, rec.Deadline.Equal(*j.Deadline))

	back := rec.Job()
	require.Equal(t, "big", back.Model())
	require.Equal(t, 64, back.MaxOutputTokens())
	require.Equal(t, j.Tenant, back.Tenant)
	require.Equal(t, "support", back.Project)
	require.JSONEq(t, string(j.Body), string(back.Body))

	// Ids are scoped by tenant: another tenant's job of the same id is its
	// own.
	other := newJob(t, "job-1")
	other.Tenant = "other"
	created, err = b.store.Jobs().Insert(b.ctx, other)
	require.NoError(t, err)
	require.True(t, created)
	rec, err = b.store.Jobs().Get(b.ctx, "other", "job-1")
	require.NoError(t, err)
	require.Equal(t, "other", rec.Tenant)
	_, err = b.store.Jobs().Get(b.ctx, "third", "job-1")
	require.ErrorIs(t, err, store.ErrNotFound)

	bad := &llmq.Job{ID: "x", Tenant: "acme", Priority: llmq.PriorityNormal, Body: json.RawMessage(`{"model":"m"}`)}
	_, err = b.store.Jobs().Insert(b.ctx, bad)
	require.ErrorIs(t, err, store.ErrInvalidJob)
}

// TestIngest records a batch in one statement: duplicates (of an existing
// job, or within the batch) are left alone and reported, the estimates and
// the claim-order key are stored.
func TestIngest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.store.Jobs().Insert(b.ctx, newJob(t, "old"))
	require.NoError(t, err)
	low := newJob(t, "low")
	low.Priority, low.Deadline = llmq.PriorityLow, nil
	due := newJob(t, "due")
	due.Priority = llmq.PriorityLow
	d := b.clock.Now().Add(30 * time.Second)
	due.Deadline = &d
	created, err := b.store.Queue().Ingest(b.ctx, []store.NewJob{
		{Job: newJob(t, "old")},
		{Job: low, EstPromptTokens: 12, EstOutputTokens: 64},
		{Job: due},
		{Job: newJob(t, "low")},
	})
	require.NoError(t, err)
	require.Equal(t, []bool{false, true, true, false}, created)

	rec, err := b.store.Jobs().Get(b.ctx, "acme", "low")
	require.NoError(t, err)
	require.Equal(t, llmq.PriorityLow, rec.Priority, "the first of two copies in one batch is recorded")
	require.Equal(t, 12, rec.EstPromptTokens)
	require.Equal(t, 64, rec.EstOutputTokens)
	require.Equal(t, b.clock.Now().Add(2*store.AgingStepDefault), rec.SchedKey.UTC())
	require.Equal(t, []string{"small"}, rec.FallbackModels)
	require.Equal(t, map[string]string{"k": "v"}, rec.Metadata)
	rec, err = b.store.Jobs().Get(b.ctx, "acme", "due")
	require.NoError(t, err)
	require.Equal(t, d.Add(-store.DeadlineLeadDefault), rec.SchedKey.UTC(), "a near deadline sorts first")

	created, err = b.store.Queue().Ingest(b.ctx, nil)
	require.NoError(t, err)
	require.Empty(t, created)
	// A decoded job changed since Decode is validated again: its body has
	// lost its messages.
	changed := newJob(t, "changed")
	changed.Body = json.RawMessage(`{"model":"big"}`)
	_, err = b.store.Queue().Ingest(b.ctx, []store.NewJob{{Job: changed}})
	require.ErrorIs(t, err, store.ErrInvalidJob)
}

// hold ingests jobs and claims every queued job of model big for owner; it
// returns the leases by id.
func (b *testBundle) hold(t *testing.T, owner string, jobs ...*llmq.Job) map[string]store.Lease {
	t.Helper()
	for _, j := range jobs {
		_, err := b.store.Jobs().Insert(b.ctx, j)
		require.NoError(t, err)
	}
	recs, err := b.store.Queue().Claim(b.ctx, store.ClaimRequest{Model: "big", Owner: owner, Lease: time.Minute, Limit: 1000})
	require.NoError(t, err)
	out := map[string]store.Lease{}
	for _, r := range recs {
		out[r.ID] = r.Lease()
	}
	return out
}

func (b *testBundle) get(t *testing.T, id string) *store.JobRecord {
	t.Helper()
	rec, err := b.store.Jobs().Get(b.ctx, "acme", id)
	require.NoError(t, err)
	return rec
}

// TestClaimOrder: a claim takes queued jobs of one model in claim order,
// up to its limit: deadline first, then priority with aging.
func TestClaimOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	add := func(id string, p llmq.Priority, deadline *time.Time, model string) {
		j, err := llmq.Decode([]byte(fmt.Sprintf(`{"id":%q,"tenant":"acme","priority":%q,
			"body":{"model":%q,"messages":[{"role":"user","content":"hi"}]}}`, id, p, model)), llmq.DecodeOptions{})
		require.NoError(t, err)
		j.Deadline = deadline
		_, err = b.store.Jobs().Insert(b.ctx, j)
		require.NoError(t, err)
	}
	add("low-early", llmq.PriorityLow, nil, "big")
	b.clock.Advance(40 * time.Second)
	add("normal", llmq.PriorityNormal, nil, "big")
	add("high", llmq.PriorityHigh, nil, "big")
	add("other-model", llmq.PriorityHigh, nil, "small")
	b.clock.Advance(10 * time.Second)
	soon := b.clock.Now().Add(30 * time.Second)
	add("due-low", llmq.PriorityLow, &soon, "big")
	b.clock.Advance(time.Second)

	var order []string
	for range 5 {
		recs, err := b.store.Queue().Claim(b.ctx, store.ClaimRequest{Model: "big", Owner: "w", Lease: time.Minute, Limit: 1})
		require.NoError(t, err)
		for _, r := range recs {
			order = append(order, r.ID)
			require.Equal(t, llmq.StatusRunning, r.Status)
			require.Equal(t, store.PhaseWaitingForQuota, r.Phase)
			require.EqualValues(t, 1, r.LeaseToken)
			require.Equal(t, "w", r.LeaseOwner)
			require.Equal(t, b.clock.Now().Add(time.Minute), r.LeaseExpiresAt.UTC())
			require.Zero(t, r.Attempts, "a claim is no call")
			require.Nil(t, r.StartedAt)
		}
	}
	// due-low at t=50s, due at 80s: key 80s-1min = 20s, before all. high at
	// t=40s (key 40s), low-early at t=0 (key 0+60s), normal at t=40s (key
	// 70s).
	require.Equal(t, []string{"due-low", "high", "low-early", "normal"}, order)
	_, err := b.store.Queue().Claim(b.ctx, store.ClaimRequest{Model: "", Owner: "w", Lease: time.Minute, Limit: 1})
	require.Error(t, err)
}

// TestClaimHoldsDeferrableJobs: while the batch lane holds, undecided
// deferrable jobs are left queued, except those whose deadline is too near
// for a batch; a deferrable job the live lane takes records why.
func TestClaimHoldsDeferrableJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, id := range []string{"plain", "deferrable", "deferrable-due", "fallback-less"} {
		j := newJob(t, id)
		j.Deferrable = id != "plain" && id != "fallback-less"
		if id == "deferrable-due" {
			d := b.clock.Now().Add(time.Hour)
			j.Deadline = &d
		}
		if id == "fallback-less" {
			j.FallbackModels = nil
		}
		_, err := b.store.Jobs().Insert(b.ctx, j)
		require.NoError(t, err)
	}
	claim := func(r store.ClaimRequest) []string {
		r.Model, r.Owner, r.Lease, r.Limit = "big", "w", time.Minute, 10
		recs, err := b.store.Queue().Claim(b.ctx, r)
		require.NoError(t, err)
		var ids []string
		for _, rec := range recs {
			ids = append(ids, rec.ID)
		}
		return ids
	}
	require.ElementsMatch(t, []string{"plain", "deferrable-due"},
		claim(store.ClaimRequest{FallbackOnly: true, HoldDeferrable: true, HoldDeadlineAfter: b.clock.Now().Add(25 * time.Hour),
			LiveReason: "live: too near"}))
	require.Equal(t, "live: too near", b.get(t, "deferrable-due").LaneReason)
	require.Equal(t, "", b.get(t, "plain").LaneReason, "only deferrable jobs record a lane")
	require.Equal(t, llmq.StatusQueued, b.get(t, "deferrable").Status)
	require.Equal(t, []string{"fallback-less"}, claim(store.ClaimRequest{HoldDeferrable: true}))
	require.Equal(t, []string{"deferrable"}, claim(store.ClaimRequest{LiveReason: "live: off-peak"}))
	require.Equal(t, "live: off-peak", b.get(t, "deferrable").LaneReason)
}

// TestConcurrentClaims: claimers racing over one backlog of three tenants
// get disjoint jobs, every job is claimed once, and none deadlocks on the
// tenants' virtual times.
func TestConcurrentClaims(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 200
	jobs := make([]store.NewJob, n)
	for i := range jobs {
		j := newJob(t, fmt.Sprintf("job-%03d", i))
		j.Tenant = fmt.Sprintf("t%d", i%3) // the claims also take turns between tenants
		jobs[i] = store.NewJob{Job: j}
	}
	_, err := b.store.Queue().Ingest(b.ctx, jobs)
	require.NoError(t, err)
	got := make([][]string, 8)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range got {
		wg.Go(func() {
			<-start
			for {
				recs, err := b.store.Queue().Claim(b.ctx, store.ClaimRequest{Model: "big", Owner: fmt.Sprintf("w%d", i),
					Lease: time.Minute, Limit: 7})
				if !assert.NoError(t, err) || len(recs) == 0 {
					return
				}
				for _, r := range recs {
					got[i] = append(got[i], r.ID)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	seen := map[string]int{}
	for _, ids := range got {
		for _, id := range ids {
			seen[id]++
		}
	}
	require.Len(t, seen, n)
	for id, k := range seen {
		require.Equal(t, 1, k, id)
	}
}

// TestHolderLifecycle walks one job through its holder's writes: a call,
// a retryable failure with its backoff, a second call, the result.
func TestHolderLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	l := b.hold(t, "w1", newJob(t, "job-1"))["job-1"]
	b.clock.Advance(time.Second)
	attempts, err := b.store.Queue().MarkCalling(b.ctx, l, store.PolicyState{})
	require.NoError(t, err)
	require.Equal(t, 1, attempts)
	rec := b.get(t, "job-1")
	require.Equal(t, store.PhaseCalling, rec.Phase)
	require.Equal(t, b.clock.Now(), rec.StartedAt.UTC())
	started := *rec.StartedAt

	require.NoError(t, b.store.Queue().MarkRetrying(b.ctx, l, store.PolicyState{Retries: 1, ModelIndex: 1, RateLimited: 2, FreeAttempts: 1},
		"rate_limited", "429 Too Many Requests"))
	rec = b.get(t, "job-1")
	require.Equal(t, llmq.StatusRetrying, rec.Status)
	require.Equal(t, store.PhaseBackingOff, rec.Phase)
	require.Equal(t, "rate_limited", rec.ErrorCode)
	require.Equal(t, []int{1, 1, 2, 1}, []int{rec.Retries, rec.ModelIndex, rec.RateLimited, rec.FreeAttempts})

	// The heartbeat renews the lease of every job the worker holds.
	b.clock.Advance(50 * time.Second)
	held, err := b.store.Queue().Heartbeat(b.ctx, "w1", time.Minute, []store.Lease{l})
	require.NoError(t, err)
	require.Equal(t, []store.Lease{l}, held)
	require.Equal(t, b.clock.Now().Add(time.Minute), b.get(t, "job-1").LeaseExpiresAt.UTC())
	held, err = b.store.Queue().Heartbeat(b.ctx, "w2", time.Minute, []store.Lease{l})
	require.NoError(t, err)
	require.Empty(t, held, "another owner renews nothing")
	held, err = b.store.Queue().Heartbeat(b.ctx, "w1", time.Minute, nil)
	require.NoError(t, err)
	require.Empty(t, held, "a lease not named is not renewed")

	b.clock.Advance(time.Second)
	attempts, err = b.store.Queue().MarkCalling(b.ctx, l, store.PolicyState{Retries: 1, ModelIndex: 1, FreeAttempts: 1})
	require.NoError(t, err)
	require.Equal(t, 2, attempts)
	rec = b.get(t, "job-1")
	require.Equal(t, llmq.StatusRunning, rec.Status)
	require.True(t, started.Equal(*rec.StartedAt), "started_at is the first call's")
	require.Equal(t, []int{0, 1}, []int{rec.RateLimited, rec.FreeAttempts})

	stored, err := b.store.Queue().StoreResult(b.ctx, l.Key, store.Result{
		Response: json.RawMessage(`{"id":"chatcmpl-1","choices":[]}`), UsedModel: "small",
		PromptTokens: 10, CompletionTokens: 5, CostUSD: 0.25,
	})
	require.NoError(t, err)
	require.True(t, stored)
	rec = b.get(t, "job-1")
	require.Equal(t, llmq.StatusSucceeded, rec.Status)
	require.JSONEq(t, `{"id":"chatcmpl-1","choices":[]}`, string(rec.Result))
	require.Equal(t, "small", rec.UsedModel)
	require.Equal(t, []int{10, 5, 2}, []int{rec.PromptTokens, rec.CompletionTokens, rec.Attempts})
	require.Equal(t, 0.25, rec.CostUSD)
	require.Equal(t, b.clock.Now(), rec.FinishedAt.UTC())
	require.Equal(t, "", rec.ErrorCode, "success clears the last retry error")
	require.Equal(t, "", rec.Phase)
	held, err = b.store.Queue().Heartbeat(b.ctx, "w1", time.Minute, []store.Lease{l})
	require.NoError(t, err)
	require.Empty(t, held, "a finished job is held no more")

	_, err = b.store.Queue().MarkCalling(b.ctx, l, store.PolicyState{})
	require.ErrorIs(t, err, store.ErrTerminal)
	require.ErrorIs(t, b.store.Queue().MarkFailed(b.ctx, store.Lease{Key: store.Key{Tenant: "acme", ID: "nope"}}, 0, "c", "m"), store.ErrNotFound)
}

// TestStaleHolderChangesNothing: a holder whose lease expired while it
// waited (its database was away, say) is reaped; another worker claims the
// job. Every fenced write of the stale holder then fails with ErrLeaseLost
// and changes nothing, and the new holder's writes work. The stale
// holder's paid answer still lands, once: the new holder stores nothing.
func TestStaleHolderChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	stale := b.hold(t, "w1", newJob(t, "job-1"))["job-1"]
	_, err := b.store.Queue().MarkCalling(b.ctx, stale, store.PolicyState{})
	require.NoError(t, err)

	b.clock.Advance(2 * time.Minute)
	reaped, err := b.store.Queue().ReapExpired(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []store.Key{stale.Key}, reaped)
	rec := b.get(t, "job-1")
	require.Equal(t, llmq.StatusQueued, rec.Status)
	require.Equal(t, "", rec.LeaseOwner)
	require.Equal(t, "", rec.Phase)

	writes := map[string]func(l store.Lease) error{
		"MarkCalling": func(l store.Lease) error {
			_, err := b.store.Queue().MarkCalling(b.ctx, l, store.PolicyState{Retries: 9})
			return err
		},
		"MarkRetrying": func(l store.Lease) error {
			return b.store.Queue().MarkRetrying(b.ctx, l, store.PolicyState{Retries: 9}, "stale", "stale")
		},
		"Release":    func(l store.Lease) error { return b.store.Queue().Release(b.ctx, l) },
		"MarkFailed": func(l store.Lease) error { return b.store.Queue().MarkFailed(b.ctx, l, 0, "stale", "stale") },
		"MarkExpired": func(l store.Lease) error {
			return b.store.Queue().MarkExpired(b.ctx, l, "stale")
		},
		"RecordDeadLetter": func(l store.Lease) error {
			_, _, err := b.store.DeadLetters().RecordDeadLetter(b.ctx, store.NewDeadLetter{KeyBase: "job:acme/job-1", JobID: "job-1",
				Tenant: "acme", Reason: "retries_exhausted", Message: []byte(`{}`), LeaseToken: l.Token})
			return err
		},
	}
	unchanged := func(what string) {
		t.Helper()
		now := b.get(t, "job-1")
		require.Equal(t, rec.Status, now.Status, what)
		require.Equal(t, rec.UpdatedAt, now.UpdatedAt, what)
		require.Equal(t, rec.Attempts, now.Attempts, what)
		require.Equal(t, rec.Retries, now.Retries, what)
		require.Equal(t, rec.LeaseToken, now.LeaseToken, what)
		letters, _, err := b.store.DeadLetters().ListDeadLetters(b.ctx, store.DeadLetterListOptions{})
		require.NoError(t, err)
		require.Empty(t, letters, what)
	}
	b.clock.Advance(time.Second)
	for name, write := range writes {
		require.ErrorIs(t, write(stale), store.ErrLeaseLost, "reaped: %s", name)
		unchanged("reaped: " + name)
	}

	fresh := b.hold(t, "w2")["job-1"]
	require.Equal(t, stale.Token+1, fresh.Token)
	_, err = b.store.Queue().MarkCalling(b.ctx, fresh, store.PolicyState{})
	require.NoError(t, err)
	rec = b.get(t, "job-1")
	require.Equal(t, 2, rec.Attempts)
	b.clock.Advance(time.Second)
	for name, write := range writes {
		require.ErrorIs(t, write(stale), store.ErrLeaseLost, "claimed again: %s", name)
		unchanged("claimed again: " + name)
	}
	held, err := b.store.Queue().Heartbeat(b.ctx, "w1", time.Minute, []store.Lease{stale})
	require.NoError(t, err)
	require.Empty(t, held, "the stale holder's heartbeat renews nothing")

	// The stale holder's call answered: its result is stored.
	stored, err := b.store.Queue().StoreResult(b.ctx, stale.Key, store.Result{Response: json.RawMessage(`{"by":"w1"}`)})
	require.NoError(t, err)
	require.True(t, stored)
	stored, err = b.store.Queue().StoreResult(b.ctx, fresh.Key, store.Result{Response: json.RawMessage(`{"by":"w2"}`)})
	require.NoError(t, err)
	require.False(t, stored, "stored once")
	require.JSONEq(t, `{"by":"w1"}`, string(b.get(t, "job-1").Result))
	_, err = b.store.Queue().MarkCalling(b.ctx, fresh, store.PolicyState{})
	require.ErrorIs(t, err, store.ErrTerminal, "the new holder learns the job is done")
}

// TestStoreResultOfAReapedJob: an answer that comes back after its job was
// reaped (queued, not yet claimed again) is stored: a paid answer is never
// thrown away.
func TestStoreResultOfAReapedJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	l := b.hold(t, "w1", newJob(t, "job-1"))["job-1"]
	b.clock.Advance(2 * time.Minute)
	_, err := b.store.Queue().ReapExpired(b.ctx)
	require.NoError(t, err)
	stored, err := b.store.Queue().StoreResult(b.ctx, l.Key, store.Result{Response: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.True(t, stored)
	require.Empty(t, b.hold(t, "w2"), "nothing left to claim")

	// A result Postgres cannot hold is a permanent error.
	l = b.hold(t, "w1", newJob(t, "job-2"))["job-2"]
	_, err = b.store.Queue().StoreResult(b.ctx, l.Key, store.Result{Response: json.RawMessage(`{"content":"a\u0000b"}`)})
	require.ErrorIs(t, err, store.ErrInvalidJob)
	require.Equal(t, llmq.StatusRunning, b.get(t, "job-2").Status)
}

func TestConcurrentStoreResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for round := range 10 {
		j := newJob(t, fmt.Sprintf("job-%d", round))
		k := b.hold(t, "w1", j)[j.ID].Key
		stored := make([]bool, 8)
		errs := make([]error, 8)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range stored {
			wg.Go(func() {
				<-start
				stored[i], errs[i] = b.store.Queue().StoreResult(b.ctx, k, store.Result{
					Response: json.RawMessage(fmt.Sprintf(`{"writer":%d}`, i)), PromptTokens: i,
				})
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i := range stored {
			require.NoError(t, errs[i])
			if stored[i] {
				require.Equal(t, -1, winner, "round %d: two stores", round)
				winner = i
			}
		}
		require.NotEqual(t, -1, winner, "round %d: no store", round)
		rec := b.get(t, j.ID)
		require.JSONEq(t, fmt.Sprintf(`{"writer":%d}`, winner), string(rec.Result))
		require.Equal(t, winner, rec.PromptTokens)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.store.Jobs().Insert(b.ctx, newJob(t, "j"))
	require.NoError(t, err)
	_, err = b.store.Jobs().Cancel(b.ctx, "other", "j")
	require.ErrorIs(t, err, store.ErrNotFound)
	rec, err := b.store.Jobs().Cancel(b.ctx, "acme", "j")
	require.NoError(t, err)
	require.Equal(t, llmq.StatusCancelled, rec.Status)
	require.Equal(t, store.ErrorCodeCancelled, rec.ErrorCode)
	_, err = b.store.Jobs().Cancel(b.ctx, "acme", "j")
	require.ErrorIs(t, err, store.ErrTerminal)
	_, err = b.store.Jobs().Cancel(b.ctx, "acme", "missing")
	require.ErrorIs(t, err, store.ErrNotFound)
}

func TestListPaging(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var want []string // newest first
	for i := range 25 {
		j := newJob(t, fmt.Sprintf("job-%02d", i))
		_, err := b.store.Jobs().Insert(b.ctx, j)
		require.NoError(t, err)
		want = append([]string{j.ID}, want...)
		if i%2 == 0 { // pairs share a created_at: the id breaks the tie
			b.clock.Advance(time.Millisecond)
		}
	}
	recs, err := b.store.Queue().Claim(b.ctx, store.ClaimRequest{Model: "big", Owner: "w", Lease: time.Minute, Limit: 9})
	require.NoError(t, err)
	require.Len(t, recs, 9)
	other := newJob(t, "other")
	other.Tenant = "other"
	_, err = b.store.Jobs().Insert(b.ctx, other)
	require.NoError(t, err)

	var got []string
	cursor, pages := "", 0
	for {
		recs, next, err := b.store.Jobs().List(b.ctx, store.ListOptions{Tenant: "acme", Limit: 10, After: cursor})
		require.NoError(t, err)
		pages++
		for _, r := range recs {
			got = append(got, r.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	require.Equal(t, 3, pages)
	require.Equal(t, want, got)

	recs, next, err := b.store.Jobs().List(b.ctx, store.ListOptions{Tenant: "acme", Status: llmq.StatusRunning})
	require.NoError(t, err)
	require.Equal(t, "", next)
	require.Len(t, recs, 9)
	all, _, err := b.store.Jobs().List(b.ctx, store.ListOptions{AllTenants: true, Status: llmq.StatusRunning})
	require.NoError(t, err)
	require.Equal(t, recs, all, "one tenant's, read across tenants")
	for _, r := range recs {
		require.Equal(t, llmq.StatusRunning, r.Status)
		got := b.get(t, r.ID)
		require.NotEmpty(t, got.Body)
		got.Body = nil
		require.Equal(t, got, r, "a listed job is the job but its body")
	}

	_, _, err = b.store.Jobs().List(b.ctx, store.ListOptions{Tenant: "acme", After: "!!"})
	require.ErrorIs(t, err, store.ErrBadCursor)

	// Counts, exact (limit 0) and bounded: each status up to the limit,
	// for a tenant and across them (acme's 16 queued and other's one add
	// up to 17, counted to 16).
	for _, c := range []struct {
		tenant          string
		limit           int64
		queued, running int64
	}{{"acme", 0, 16, 9}, {"", 0, 17, 9}, {"acme", 10, 10, 9}, {"", 16, 16, 9}, {"", 17, 17, 9}} {
		counts, err := b.store.Jobs().CountByStatus(b.ctx, c.tenant, c.limit)
		require.NoError(t, err)
		require.Equal(t, map[llmq.Status]int64{llmq.StatusQueued: c.queued, llmq.StatusRunning: c.running}, counts, "%+v", c)
	}
}

// TestInsertEdgeBodies stores bodies at the edges of what Decode accepts:
// whatever Decode accepts, Postgres must store, by Insert and by Ingest.
func TestInsertEdgeBodies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	big := "1" + strings.Repeat("0", 4999)
	tiny := "0." + strings.Repeat("0", 4990) + "1e-5000"
	// As deep as Decode takes: the body and the job object are two levels.
	deep := strings.Repeat("[", llmq.MaxDepth-2) + strings.Repeat("]", llmq.MaxDepth-2)
	var batch []store.NewJob
	for i, extra := range []string{
		`"temperature":1e5000`, `"temperature":1e-5000`, `"n":` + big, `"x":` + tiny, `"x":` + deep,
		`"x":"\ud83d\ude00 \\u0000 \u00e9 \"q\" <&>"`, `"x":{"":null,"a":[true,false,{}]}`,
	} {
		for _, kind := range []string{"insert", "ingest"} {
			msg := fmt.Sprintf(`{"id":"%s-%d","body":{"model":"m","messages":[{"role":"user","content":"x"}],%s}}`, kind, i, extra)
			j, err := llmq.Decode([]byte(msg), llmq.DecodeOptions{})
			require.NoError(t, err, extra)
			if kind == "ingest" {
				batch = append(batch, store.NewJob{Job: j})
				continue
			}
			created, err := b.store.Jobs().Insert(b.ctx, j)
			require.NoError(t, err, extra)
			require.True(t, created)
		}
	}
	created, err := b.store.Queue().Ingest(b.ctx, batch)
	require.NoError(t, err)
	for i, c := range created {
		require.True(t, c, i)
	}
	recs, _, err := b.store.Jobs().List(b.ctx, store.ListOptions{Tenant: llmq.DefaultTenant})
	require.NoError(t, err)
	require.Len(t, recs, 2*len(batch))
	for _, rec := range recs { // a listing leaves the bodies out: read each
		got, err := b.store.Jobs().Get(b.ctx, rec.Tenant, rec.ID)
		require.NoError(t, err)
		require.Equal(t, "m", got.Job().Model())
	}
}

func TestExpireOverdue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mk := func(id, deadline string) *llmq.Job {
		d := ""
		if deadline != "" {
			d = `"deadline":"` + deadline + `",`
		}
		j, err := llmq.Decode([]byte(`{"id":"`+id+`","tenant":"acme",`+d+`"body":{"model":"big","messages":[{"role":"user"}]}}`), llmq.DecodeOptions{})
		require.NoError(t, err)
		return j
	}
	require.Len(t, b.hold(t, "w", mk("running", "2026-11-30T11:00:00Z")), 1)
	for _, j := range []*llmq.Job{mk("due", "2026-11-30T11:59:59Z"), mk("later", "2026-11-30T12:00:01Z"), mk("none", "")} {
		_, err := b.store.Jobs().Insert(b.ctx, j)
		require.NoError(t, err)
	}
	keys, err := b.store.Queue().ExpireOverdue(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []store.Key{{Tenant: "acme", ID: "due"}}, keys)
	rec := b.get(t, "due")
	require.Equal(t, llmq.StatusExpired, rec.Status)
	require.Equal(t, store.ErrorCodeExpired, rec.ErrorCode)
	b.clock.Advance(2 * time.Second)
	keys, err = b.store.Queue().ExpireOverdue(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []store.Key{{Tenant: "acme", ID: "later"}}, keys)
	require.Equal(t, llmq.StatusRunning, b.get(t, "running").Status, "a held job is its holder's to expire")
}

// TestWaitingReason: a queued job says why it waits from what its model's
// schedulers last recorded, while that is fresh.
func TestWaitingReason(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, id := range []string{"plain", "deferrable"} {
		j := newJob(t, id)
		j.Deferrable = id == "deferrable"
		_, err := b.store.Jobs().Insert(b.ctx, j)
		require.NoError(t, err)
	}
	require.Equal(t, "", b.get(t, "plain").WaitingReason, "no scheduler said anything")
	require.NoError(t, b.store.Queue().SetModelState(b.ctx, store.ModelState{Model: "big",
		WaitingReason: store.WaitingReasonProviderQuota, BatchHold: true, Worker: "w"}))
	require.Equal(t, store.WaitingReasonProviderQuota, b.get(t, "plain").WaitingReason)
	require.Equal(t, store.WaitingReasonBatch, b.get(t, "deferrable").WaitingReason)
	recs, _, err := b.store.Jobs().List(b.ctx, store.ListOptions{Tenant: "acme"})
	require.NoError(t, err)
	for _, r := range recs {
		require.NotEmpty(t, r.WaitingReason, r.ID)
	}
	b.clock.Advance(store.ModelStateTTL)
	require.Equal(t, "", b.get(t, "plain").WaitingReason, "a stale state says nothing")
	require.Len(t, b.hold(t, "w"), 2)
	require.Equal(t, "", b.get(t, "plain").WaitingReason, "a running job waits for nothing")
}

// TestRunReadings: the readings of a run's report (bench, demo) of one job
// that succeeded on a fallback, its call 2 s after its record and its end
// 3 s later, and one still queued.
func TestRunReadings(t *testing.T) {
	t.Parallel()
	b := setup(t)
	t0 := b.clock.Now()
	l := b.claimOne(t, "j1")
	_, err := b.store.Jobs().Insert(b.ctx, newJob(t, "j2"))
	require.NoError(t, err)
	b.clock.Advance(2 * time.Second)
	_, err = b.store.Queue().MarkCalling(b.ctx, l, store.PolicyState{ModelIndex: 1, Call: store.Call{Model: "small"}})
	require.NoError(t, err)
	b.clock.Advance(3 * time.Second)
	stored, err := b.store.Queue().StoreResult(b.ctx, l.Key, store.Result{Response: []byte(`{}`), UsedModel: "small"})
	require.NoError(t, err)
	require.True(t, stored)

	ended, err := b.store.Jobs().CountEnded(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, ended)
	outcomes, err := b.store.Jobs().JobOutcomes(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []store.JobOutcome{{ID: "j1", Status: llmq.StatusSucceeded, UsedModel: "small", Latency: 5 * time.Second},
		{ID: "j2", Status: llmq.StatusQueued}}, outcomes)
	tallies, err := b.store.Jobs().TallyJobs(b.ctx, "acme", []string{"j1", "j2", "none"})
	require.NoError(t, err)
	require.ElementsMatch(t, []store.JobTally{{Status: llmq.StatusSucceeded, Fallback: true, N: 1}, {Status: llmq.StatusQueued, N: 1}}, tallies)
	done, err := b.store.Jobs().SucceededJobs(b.ctx, []string{"j1", "j2"})
	require.NoError(t, err)
	require.Len(t, done, 1)
	require.True(t, t0.Add(5*time.Second).Equal(done[0].FinishedAt))
	done[0].FinishedAt = time.Time{}
	require.Equal(t, store.SucceededJob{ID: "j1", Latency: 5 * time.Second, Lane: store.LaneLive}, done[0])
	span, err := b.store.Jobs().CallSpan(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, span)
	toCall, warm, err := b.store.Jobs().TimesToFirstCall(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []time.Duration{2 * time.Second}, toCall)
	require.Empty(t, warm, "recorded before the first call's answer")
}
