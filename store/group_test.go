package store_test

import (
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
		_, err := b.store.Claim(b.ctx, jobs[i], "w", time.Minute)
		require.NoError(t, err)
	}
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
			errs[i] = b.store.MarkFailed(b.ctx, j.ID, "code", msg)
		})
	}
	close(start)
	wg.Wait()
	for i, j := range jobs {
		rec, err := b.store.GetByID(b.ctx, j.ID)
		require.NoError(t, err)
		if i == 7 {
			require.ErrorIs(t, errs[i], store.ErrInvalidJob)
			require.Equal(t, llmq.StatusRunning, rec.Status)
			continue
		}
		require.NoError(t, errs[i])
		require.Equal(t, llmq.StatusFailed, rec.Status)
		require.Equal(t, "upstream said no", rec.ErrorMessage)
	}
}

// TestStoreWithoutGroupCommit checks the direct path New takes by default.
func TestStoreWithoutGroupCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	direct := store.New(b.store.Pool(), store.WithGroupCommit(0))
	j := newJob(t, "direct-1")
	rec, err := direct.Claim(b.ctx, j, "w", time.Minute)
	require.NoError(t, err)
	require.Equal(t, llmq.StatusRunning, rec.Status)
	stored, err := direct.StoreResult(b.ctx, j.ID, store.Result{Response: []byte(`{"ok":true}`)})
	require.NoError(t, err)
	require.True(t, stored)
}

// TestClosedStoreFailsAtOnce: an operation on a closed store returns an
// error instead of waiting for a committer that is gone.
func TestClosedStoreFailsAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := newJob(t, "closed-1")
	b.store.Close()
	_, err := b.store.Claim(b.ctx, j, "w", time.Minute)
	require.ErrorContains(t, err, "closed")
}
