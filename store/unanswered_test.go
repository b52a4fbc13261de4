package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// TestUnansweredClaim: a claim sent whose answer does not come back (here
// the deadline passes while the jobs table is locked) is an
// UnansweredClaimError naming the claim's owner, time and lease; one that
// could not be sent (no connection) is not, for it wrote nothing.
func TestUnansweredClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.store.Jobs().Insert(b.ctx, newJob(t, "job-1"))
	require.NoError(t, err)

	tx, err := b.store.Pool().Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(b.ctx, 200*time.Millisecond)
	defer cancel()
	_, _, err = b.store.Queue().ClaimWithin(ctx, store.ClaimRequest{Model: "big", Owner: "w1", Lease: time.Minute, Limit: 10})
	require.NoError(t, tx.Rollback(b.ctx))
	u, ok := errors.AsType[*store.UnansweredClaimError](err)
	require.True(t, ok, "a claim sent and not answered: %v", err)
	require.Equal(t, store.UnansweredClaimError{Owner: "w1", At: b.clock.Now(), Until: b.clock.Now().Add(time.Minute), Err: u.Err}, *u)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	keys, err := b.store.Queue().ReleaseClaim(b.ctx, u)
	require.NoError(t, err)
	require.Empty(t, keys, "the claim was cancelled: it wrote nothing")
	require.Equal(t, llmq.StatusQueued, b.get(t, "job-1").Status)

	pool, err := pgxpool.New(b.ctx, "postgres://postgres@127.0.0.1:1/llmq?connect_timeout=5")
	require.NoError(t, err)
	defer pool.Close()
	_, _, err = store.New(pool).Queue().ClaimWithin(b.ctx, store.ClaimRequest{Model: "big", Owner: "w1", Lease: time.Minute, Limit: 10})
	require.Error(t, err)
	_, ok = errors.AsType[*store.UnansweredClaimError](err)
	require.False(t, ok, "a claim never sent is not unanswered: %v", err)
}

// TestReleaseClaim: the jobs an unanswered claim took go back to queued at
// once, not when their lease ends; a job the claim took that was changed
// since (its lease renewed by a holder), and the jobs of another claim of
// the same owner, are left as they are.
func TestReleaseClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.hold(t, "w1", newJob(t, "job-1"), newJob(t, "job-2"), newJob(t, "job-3"))
	rec := b.get(t, "job-1")
	lost := &store.UnansweredClaimError{Owner: "w1", At: rec.UpdatedAt.UTC(), Until: rec.LeaseExpiresAt.UTC(), Err: errors.New("connection reset")}
	b.clock.Advance(time.Second)
	second := b.hold(t, "w1", newJob(t, "job-4"))
	held, err := b.store.Queue().Heartbeat(b.ctx, "w1", time.Minute, []store.Lease{first["job-3"]})
	require.NoError(t, err)
	require.Len(t, held, 1)

	keys, err := b.store.Queue().ReleaseClaim(b.ctx, lost)
	require.NoError(t, err)
	require.ElementsMatch(t, []store.Key{first["job-1"].Key, first["job-2"].Key}, keys)
	for _, id := range []string{"job-1", "job-2"} {
		rec := b.get(t, id)
		require.Equal(t, llmq.StatusQueued, rec.Status, id)
		require.Equal(t, "", rec.LeaseOwner, id)
		require.Nil(t, rec.LeaseExpiresAt, id)
		require.Equal(t, "", rec.Phase, id)
	}
	require.Equal(t, llmq.StatusRunning, b.get(t, "job-3").Status, "renewed: a holder has it")
	require.Equal(t, llmq.StatusRunning, b.get(t, "job-4").Status, "another claim's")
	require.Len(t, second, 1)

	keys, err = b.store.Queue().ReleaseClaim(b.ctx, lost)
	require.NoError(t, err)
	require.Empty(t, keys, "handed back once")
}
