package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

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
			errs[i] = b.store.MarkFailed(b.ctx, leases[j.ID], 400+i, "code", msg)
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

	// The one flush slot runs a write that waits on a row lock held here.
	tx, err := b.store.Pool().Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) //nolint:errcheck
	_, err = tx.Exec(b.ctx, `SELECT 1 FROM jobs WHERE id = 'blocker' FOR UPDATE`)
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make(chan error, n+1)
	wg.Go(func() {
		_, err := s.MarkCalling(b.ctx, leases["blocker"], store.PolicyState{})
		errs <- err
	})
	require.Eventually(t, func() bool {
		var waiting int
		err := b.store.Pool().QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		return err == nil && waiting == 1
	}, 10*time.Second, 5*time.Millisecond, "the blocker's flush waits on the lock")

	// Meanwhile 50 writes queue for the slot; once it is free, they run.
	for _, id := range ids {
		wg.Go(func() {
			_, err := s.MarkCalling(b.ctx, leases[id], store.PolicyState{})
			errs <- err
		})
	}
	require.Eventually(t, func() bool { return store.QueuedOps(s) == n }, 10*time.Second, time.Millisecond)
	require.NoError(t, tx.Rollback(b.ctx))
	wg.Wait()
	close(errs)
	for err := range errs {
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

// TestStoreWithoutGroupCommit checks the direct path New takes by default.
func TestStoreWithoutGroupCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	direct := store.New(b.store.Pool(), store.WithGroupCommit(0))
	l := b.hold(t, "w", newJob(t, "direct-1"))["direct-1"]
	attempts, err := direct.MarkCalling(b.ctx, l, store.PolicyState{})
	require.NoError(t, err)
	require.Equal(t, 1, attempts)
	stored, err := direct.StoreResult(b.ctx, l.Key, store.Result{Response: []byte(`{"ok":true}`)})
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
	_, err := b.store.MarkCalling(b.ctx, l, store.PolicyState{})
	require.ErrorContains(t, err, "closed")
}
