package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// TestGroupCommitIsolatesAFailingOp runs many concurrent state changes, one
// of which Postgres refuses (a NUL byte in text). The refused one fails with
// its own error; every other change is written.
func TestGroupCommitIsolatesAFailingOp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 40
	jobs := make([]*llmq.Job, n)
	for i := range jobs {
		jobs[i] = newJob(t, fmt.Sprintf("g-%02d", i))
	}
	leases := b.hold(t, "w", jobs...)
	require.Len(t, leases, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, j := range jobs {
		wg.Go(func() {
			<-start
			msg := "upstream said no"
			if i == 7 {
				msg = "bad \x00 byte"
			}
			errs[i] = b.store.Queue().MarkFailed(b.ctx, leases[j.ID], 400+i, "code", msg)
		})
	}
	close(start)
	wg.Wait()
	for i, j := range jobs {
		rec := b.get(t, j.ID)
		if i == 7 {
			require.ErrorIs(t, errs[i], store.ErrInvalidJob)
			require.Equal(t, llmq.StatusRunning, rec.Status)
			continue
		}
		require.NoError(t, errs[i])
		require.Equal(t, llmq.StatusFailed, rec.Status)
		require.Equal(t, "upstream said no", rec.ErrorMessage)
		require.Equal(t, 400+i, rec.ErrorStatus, "each job keeps its own upstream status")
	}
}

// TestGroupCommitSharesATransaction: operations that queue while every
// flush slot is busy are written by one transaction, which Postgres shows
// as one xmin on the rows they wrote.
func TestGroupCommitSharesATransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := store.New(b.store.Pool(), store.WithClock(b.clock), store.WithGroupCommit(1))
	t.Cleanup(s.Close)
	const n = 50
	jobs := []*llmq.Job{newJob(t, "blocker")}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("grouped-%02d", i)
		jobs = append(jobs, newJob(t, ids[i]))
	}
	leases := b.hold(t, "w", jobs...)
	require.Len(t, leases, n+1)
	errs := make([]error, n)
	flushTogether(t, b, s, leases["blocker"], n, func(i int) {
		_, errs[i] = s.Queue().MarkCalling(b.ctx, leases[ids[i]], store.PolicyState{})
	})
	for _, err := range errs {
		require.NoError(t, err)
	}

	var txns, calling int
	var blockerTxn, groupTxn string
	require.NoError(t, b.store.Pool().QueryRow(b.ctx, `SELECT count(DISTINCT xmin::text), min(xmin::text),
		count(*) FILTER (WHERE phase = 'calling') FROM jobs WHERE id = ANY($1)`, ids).Scan(&txns, &groupTxn, &calling))
	require.Equal(t, n, calling)
	require.Equal(t, 1, txns, "the queued writes share one transaction")
	require.NoError(t, b.store.Pool().QueryRow(b.ctx, `SELECT xmin::text FROM jobs WHERE id = 'blocker'`).Scan(&blockerTxn))
	require.NotEqual(t, blockerTxn, groupTxn, "the blocker committed on its own first")
}

// flushTogether runs n calls of op (op(i)) as one flush of s, a store of
// one flush slot: the slot is first held by a MarkCalling of blocker that
// waits on a row lock taken here, until the n ops are queued.
func flushTogether(t *testing.T, b *testBundle, s *store.Store, blocker store.Lease, n int, op func(i int)) {
	t.Helper()
	tx, err := b.store.Pool().Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) //nolint:errcheck
	_, err = tx.Exec(b.ctx, `SELECT 1 FROM jobs WHERE tenant = $1 AND id = $2 FOR UPDATE`, blocker.Tenant, blocker.ID)
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := s.Queue().MarkCalling(b.ctx, blocker, store.PolicyState{})
		assert.NoError(t, err)
	})
	require.Eventually(t, func() bool {
		var waiting int
		err := b.store.Pool().QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		return err == nil && waiting == 1
	}, 10*time.Second, 5*time.Millisecond, "the blocker's flush waits on the lock")
	for i := range n {
		wg.Go(func() { op(i) })
	}
	require.Eventually(t, func() bool { return store.QueuedOps(s) == n }, 10*time.Second, time.Millisecond)
	require.NoError(t, tx.Rollback(b.ctx))
	wg.Wait()
}

// TestGroupCommitMergesRows: the MarkCalling and StoreResult ops of one
// flush run as one statement each, and every op still gets its own answer:
// its job's attempts, its own result, a lease lost or a result stored
// already; two results for one job in one flush store one.
func TestGroupCommitMergesRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := store.New(b.store.Pool(), store.WithClock(b.clock), store.WithGroupCommit(1))
	t.Cleanup(s.Close)
	const n = 40
	jobs := []*llmq.Job{newJob(t, "blocker")}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("merged-%02d", i)
		jobs = append(jobs, newJob(t, ids[i]))
	}
	leases := b.hold(t, "w", jobs...)
	// Job i has made i%3 calls before.
	for i, id := range ids {
		for range i % 3 {
			_, err := s.Queue().MarkCalling(b.ctx, leases[id], store.PolicyState{})
			require.NoError(t, err)
		}
	}
	stale := leases[ids[5]]
	stale.Token--

	// Job 0 calls twice in the flush (op n): whichever of its two ops comes
	// first is merged, the other runs after the merged statement.
	attempts, errs := make([]int, n+1), make([]error, n+1)
	flushTogether(t, b, s, leases["blocker"], n+1, func(i int) {
		l := leases[ids[i%n]]
		if i == 5 {
			l = stale
		}
		attempts[i], errs[i] = s.Queue().MarkCalling(b.ctx, l, store.PolicyState{Retries: i % n, FreeAttempts: 2 * (i % n)})
	})
	require.NoError(t, errs[n])
	require.ElementsMatch(t, []int{1, 2}, []int{attempts[0], attempts[n]}, "both calls of job 0 are counted")
	for i, id := range ids {
		if i == 5 {
			require.ErrorIs(t, errs[i], store.ErrLeaseLost)
			continue
		}
		require.NoError(t, errs[i], id)
		if i != 0 {
			require.Equal(t, i%3+1, attempts[i], id)
		}
		rec := b.get(t, id)
		require.Equal(t, [2]int{i, 2 * i}, [2]int{rec.Retries, rec.FreeAttempts}, id)
	}

	// Results: job i's own answer; job 0 answered twice; job 1 already
	// succeeded; job 2 with no body.
	_, err := s.Queue().StoreResult(b.ctx, leases[ids[1]].Key, store.Result{Response: []byte(`{"first":true}`)})
	require.NoError(t, err)
	stored, errs := make([]bool, n+1), make([]error, n+1)
	flushTogether(t, b, s, leases["blocker"], n+1, func(i int) {
		k := leases[ids[i%n]].Key
		r := store.Result{Response: []byte(fmt.Sprintf(`{"id":%q,"op":%d}`, k.ID, i)), UsedModel: "m" + k.ID,
			PromptTokens: i, CompletionTokens: 2 * i, CostUSD: float64(i) / 100}
		if i == 2 {
			r.Response = nil
		}
		stored[i], errs[i] = s.Queue().StoreResult(b.ctx, k, r)
	})
	for i := range n + 1 {
		require.NoError(t, errs[i], i)
	}
	require.NotEqual(t, stored[0], stored[n], "one of job 0's two results is stored")
	require.False(t, stored[1], "job 1 had succeeded")
	for i := 2; i < n; i++ {
		require.True(t, stored[i], i)
		rec := b.get(t, ids[i])
		require.Equal(t, llmq.StatusSucceeded, rec.Status)
		require.Equal(t, "m"+ids[i], rec.UsedModel)
		require.Equal(t, [2]int{i, 2 * i}, [2]int{rec.PromptTokens, rec.CompletionTokens})
		require.InDelta(t, float64(i)/100, rec.CostUSD, 1e-9)
		if i == 2 {
			require.Empty(t, rec.Result)
			continue
		}
		require.JSONEq(t, fmt.Sprintf(`{"id":%q,"op":%d}`, ids[i], i), string(rec.Result))
	}
	require.JSONEq(t, `{"first":true}`, string(b.get(t, ids[1]).Result))
	winner := 0
	if stored[n] {
		winner = n
	}
	require.JSONEq(t, fmt.Sprintf(`{"id":%q,"op":%d}`, ids[0], winner), string(b.get(t, ids[0]).Result))
}

// TestGroupCommitMergesAttempts: merged MarkCalling and StoreResult ops
// record the calls exactly as the ops on their own do: each MarkCalling
// inserts its call (model, waits) and first records the answer to the
// job's previous call; each StoreResult records the answer to the last
// call. Every row of job_attempts is written by the one transaction of its
// flush (one xmin), so no op fell back to running on its own.
func TestGroupCommitMergesAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := store.New(b.store.Pool(), store.WithClock(b.clock), store.WithGroupCommit(1))
	t.Cleanup(s.Close)
	const n = 20
	jobs := []*llmq.Job{newJob(t, "blocker")}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("att-%02d", i)
		jobs = append(jobs, newJob(t, ids[i]))
	}
	leases := b.hold(t, "w", jobs...)
	t0 := b.clock.Now().UTC()
	// Odd jobs have made a call before, not answered yet.
	for i := 1; i < n; i += 2 {
		_, err := s.Queue().MarkCalling(b.ctx, leases[ids[i]], store.PolicyState{Call: store.Call{Model: "first"}})
		require.NoError(t, err)
	}
	// writers counts the transactions that last wrote the rows of
	// job_attempts with outcome like.
	writers := func(outcome string) int {
		var xmins int
		require.NoError(t, b.store.Pool().QueryRow(b.ctx, `SELECT count(DISTINCT xmin::text) FROM job_attempts
			WHERE job_id LIKE 'att-%' AND outcome LIKE $1`, outcome).Scan(&xmins))
		return xmins
	}

	b.clock.Advance(time.Second)
	t1 := b.clock.Now().UTC()
	attempts, errs := make([]int, n), make([]error, n)
	flushTogether(t, b, s, leases["blocker"], n, func(i int) {
		st := store.PolicyState{Call: store.Call{Model: fmt.Sprintf("m%d", i),
			QuotaWait: time.Duration(i) * time.Millisecond, Backoff: time.Duration(2*i) * time.Millisecond}}
		if i%2 == 1 {
			st.Answered = &store.Answer{Attempt: 1, At: t1, Status: 429, Outcome: "rate_limited",
				ErrorCode: fmt.Sprintf("e%d", i), RetryAfter: time.Duration(i) * time.Second}
		}
		attempts[i], errs[i] = s.Queue().MarkCalling(b.ctx, leases[ids[i]], st)
	})
	for i := range n {
		require.NoError(t, errs[i], i)
		require.Equal(t, 1+i%2, attempts[i], i)
	}
	require.Equal(t, 1, writers("%"), "one flush wrote every call and answer")

	b.clock.Advance(time.Second)
	t2 := b.clock.Now().UTC()
	flushTogether(t, b, s, leases["blocker"], n, func(i int) {
		k := leases[ids[i]].Key
		_, errs[i] = s.Queue().StoreResult(b.ctx, k, store.Result{Response: []byte(`{}`), Answered: &store.Answer{
			Attempt: 1 + i%2, At: t2, Status: 200, Outcome: "success", PromptTokens: i, CompletionTokens: 3 * i}})
	})
	for i := range n {
		require.NoError(t, errs[i], i)
	}
	require.Equal(t, 1, writers("success"), "one flush wrote every answer")

	for i, id := range ids {
		last := store.Attempt{Seq: 1 + i%2, Attempt: 1 + i%2, Model: fmt.Sprintf("m%d", i), StartedAt: t1,
			QuotaWait: time.Duration(i) * time.Millisecond, Backoff: time.Duration(2*i) * time.Millisecond,
			FinishedAt: &t2, Status: 200, Outcome: "success", PromptTokens: i, CompletionTokens: 3 * i}
		want := []store.Attempt{last}
		if i%2 == 1 {
			retryAfter := time.Duration(i) * time.Second
			want = []store.Attempt{{Seq: 1, Attempt: 1, Model: "first", StartedAt: t0, FinishedAt: &t1, Status: 429,
				Outcome: "rate_limited", ErrorCode: fmt.Sprintf("e%d", i), RetryAfter: &retryAfter}, last}
		}
		got, err := s.Jobs().Attempts(b.ctx, leases[id].Tenant, id)
		require.NoError(t, err)
		require.Equal(t, want, got, id)
	}
}

// TestStoreWithoutGroupCommit checks the direct path New takes by default.
func TestStoreWithoutGroupCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	direct := store.New(b.store.Pool(), store.WithGroupCommit(0))
	l := b.hold(t, "w", newJob(t, "direct-1"))["direct-1"]
	attempts, err := direct.Queue().MarkCalling(b.ctx, l, store.PolicyState{})
	require.NoError(t, err)
	require.Equal(t, 1, attempts)
	stored, err := direct.Queue().StoreResult(b.ctx, l.Key, store.Result{Response: []byte(`{"ok":true}`)})
	require.NoError(t, err)
	require.True(t, stored)
}

// TestClosedStoreFailsAtOnce: an operation on a closed store returns an
// error instead of waiting for a committer that is gone.
func TestClosedStoreFailsAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	l := b.hold(t, "w", newJob(t, "closed-1"))["closed-1"]
	b.store.Close()
	_, err := b.store.Queue().MarkCalling(b.ctx, l, store.PolicyState{})
	require.ErrorContains(t, err, "closed")
}
