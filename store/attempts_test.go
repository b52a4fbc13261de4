package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// claimOne inserts job id and claims it.
func (b *testBundle) claimOne(t *testing.T, id string) store.Lease {
	t.Helper()
	_, err := b.store.Jobs().Insert(b.ctx, newJob(t, id))
	require.NoError(t, err)
	recs, err := b.store.Queue().Claim(b.ctx, store.ClaimRequest{Model: "big", Owner: "w", Lease: time.Minute, Limit: 1})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	return recs[0].Lease()
}

func rateLimited(n int, at time.Time) *store.Answer {
	return &store.Answer{Attempt: n, At: at, Status: 429, Outcome: "rate_limited", ErrorCode: "rate_limit_exceeded",
		RetryAfter: 1500 * time.Millisecond, LimitRequests: 60, LimitTokens: 90000}
}

// TestAttemptsTwo429sThenSuccess: a job answered 429, 429, then 200 has
// exactly three attempts, each recorded by the writes the worker makes
// anyway (MarkCalling, MarkRetrying, StoreResult).
func TestAttemptsTwo429sThenSuccess(t *testing.T) {
	t.Parallel()
	b := setup(t)
	l := b.claimOne(t, "j")
	t0 := b.clock.Now()

	n, err := b.store.Queue().MarkCalling(b.ctx, l, store.PolicyState{Call: store.Call{Model: "big", QuotaWait: 250 * time.Millisecond}})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	b.clock.Advance(time.Second)
	require.NoError(t, b.store.Queue().MarkRetrying(b.ctx, l, store.PolicyState{Retries: 1, RateLimited: 1,
		Answered: rateLimited(1, b.clock.Now())}, "rate_limit_exceeded", "slow down"))

	b.clock.Advance(2 * time.Second)
	n, err = b.store.Queue().MarkCalling(b.ctx, l, store.PolicyState{Retries: 1, RateLimited: 1,
		Call: store.Call{Model: "big", Backoff: 1500 * time.Millisecond}})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	b.clock.Advance(time.Second)
	require.NoError(t, b.store.Queue().MarkRetrying(b.ctx, l, store.PolicyState{Retries: 2, RateLimited: 2,
		Answered: rateLimited(2, b.clock.Now())}, "rate_limit_exceeded", "slow down"))

	// The job falls back to "small": the answer to call 2 is already in,
	// so this MarkCalling records only the call.
	b.clock.Advance(2 * time.Second)
	n, err = b.store.Queue().MarkCalling(b.ctx, l, store.PolicyState{Retries: 2, ModelIndex: 1,
		Call: store.Call{Model: "small", QuotaWait: 40 * time.Millisecond, Backoff: 2 * time.Second}})
	require.NoError(t, err)
	require.Equal(t, 3, n)
	b.clock.Advance(time.Second)
	stored, err := b.store.Queue().StoreResult(b.ctx, l.Key, store.Result{Response: []byte(`{}`), UsedModel: "small",
		PromptTokens: 9, CompletionTokens: 3, Answered: &store.Answer{Attempt: 3, At: b.clock.Now(), Status: 200,
			Outcome: "success", PromptTokens: 9, CompletionTokens: 3}})
	require.NoError(t, err)
	require.True(t, stored)

	got, err := b.store.Jobs().Attempts(b.ctx, "acme", "j")
	require.NoError(t, err)
	at := func(d time.Duration) *time.Time { x := t0.Add(d); return &x }
	ra := 1500 * time.Millisecond
	require.Equal(t, []store.Attempt{
		{Seq: 1, Attempt: 1, Model: "big", StartedAt: t0, QuotaWait: 250 * time.Millisecond, FinishedAt: at(time.Second),
			Status: 429, Outcome: "rate_limited", ErrorCode: "rate_limit_exceeded", RetryAfter: &ra},
		{Seq: 2, Attempt: 2, Model: "big", StartedAt: t0.Add(3 * time.Second), Backoff: ra, FinishedAt: at(4 * time.Second),
			Status: 429, Outcome: "rate_limited", ErrorCode: "rate_limit_exceeded", RetryAfter: &ra},
		{Seq: 3, Attempt: 3, Model: "small", StartedAt: t0.Add(6 * time.Second), QuotaWait: 40 * time.Millisecond,
			Backoff: 2 * time.Second, FinishedAt: at(7 * time.Second), Status: 200, Outcome: "success",
			PromptTokens: 9, CompletionTokens: 3},
	}, got)

	// A write retried after a database error records nothing twice.
	require.NoError(t, b.store.Queue().EndAttempt(b.ctx, l.Key, store.Answer{Attempt: 3, At: b.clock.Now(), Status: 500}))
	again, err := b.store.Jobs().Attempts(b.ctx, "acme", "j")
	require.NoError(t, err)
	require.Equal(t, got, again)

	stats, err := b.store.Jobs().ModelStats(b.ctx, "", t0.Add(-time.Hour))
	require.NoError(t, err)
	require.Len(t, stats, 2)
	big, small := stats[0], stats[1]
	require.Equal(t, "big", big.Model)
	require.Equal(t, 60.0, big.LimitRequests)
	require.Equal(t, 90000.0, big.LimitTokens)
	// Waits of 0 and 250 ms: the median is the first (under 1 ms), the
	// 95th percentile the second's bucket (200-500 ms) capped at 250 ms.
	require.Equal(t, []store.ModelMinute{{Minute: t0, Requests: 2, RateLimited: 2, QuotaWaitMean: 125 * time.Millisecond,
		QuotaWaitP50: 0, QuotaWaitP95: 250 * time.Millisecond, Concurrency: 2.0 / 60}}, big.Minutes)
	require.Equal(t, "small", small.Model)
	require.Equal(t, []store.ModelMinute{{Minute: t0, Requests: 1, Tokens: 12, QuotaWaitMean: 40 * time.Millisecond,
		QuotaWaitP50: 40 * time.Millisecond, QuotaWaitP95: 40 * time.Millisecond, Concurrency: 1.0 / 60}}, small.Minutes)

	other, err := b.store.Jobs().ModelStats(b.ctx, "someone-else", t0.Add(-time.Hour))
	require.NoError(t, err)
	require.Empty(t, other, "a tenant sees its own calls only")
}

// TestAttemptsTerminalAndReplay: a call whose answer ends the job records
// it with EndAttempt; an unanswered call counts in flight; a replayed job
// counts its attempts from 1 again and keeps the earlier rows.
func TestAttemptsTerminalAndReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	l := b.claimOne(t, "j")
	_, err := b.store.Queue().MarkCalling(b.ctx, l, store.PolicyState{Call: store.Call{Model: "big"}})
	require.NoError(t, err)

	stats, err := b.store.Jobs().ModelStats(b.ctx, "acme", b.clock.Now().Add(-time.Minute))
	require.NoError(t, err)
	require.Len(t, stats, 1)
	require.Equal(t, int64(1), stats[0].InFlight)

	require.NoError(t, b.store.Queue().EndAttempt(b.ctx, l.Key, store.Answer{Attempt: 1, At: b.clock.Now(), Status: 502,
		Outcome: "retryable", ErrorCode: "server_error"}))
	_, _, err = b.store.DeadLetters().RecordDeadLetter(b.ctx, store.NewDeadLetter{KeyBase: "job:acme/j", JobID: "j", Tenant: "acme",
		Reason: "retries_exhausted", Message: []byte(`{}`), LeaseToken: l.Token})
	require.NoError(t, err)
	_, err = b.store.DeadLetters().Requeue(b.ctx, "acme", "j")
	require.NoError(t, err)

	recs, err := b.store.Queue().Claim(b.ctx, store.ClaimRequest{Model: "big", Owner: "w", Lease: time.Minute, Limit: 1})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	n, err := b.store.Queue().MarkCalling(b.ctx, recs[0].Lease(), store.PolicyState{})
	require.NoError(t, err)
	require.Equal(t, 1, n)

	got, err := b.store.Jobs().Attempts(b.ctx, "acme", "j")
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, []int{1, 2}, []int{got[0].Seq, got[1].Seq})
	require.Equal(t, []int{1, 1}, []int{got[0].Attempt, got[1].Attempt})
	require.Equal(t, 502, got[0].Status)
	require.Equal(t, "big", got[1].Model, "no model given: the requested one")
	require.Nil(t, got[1].FinishedAt)
	require.Equal(t, llmq.StatusRunning, recs[0].Status)
}

// TestAttemptsPrunedWithTheirJob: retention deletes a job's attempts with
// the job.
func TestAttemptsPrunedWithTheirJob(t *testing.T) {
	t.Parallel()
	b := setupRetention(t)
	b.finished(t, "old", llmq.StatusSucceeded, 48*time.Hour)
	b.finished(t, "new", llmq.StatusSucceeded, time.Hour)
	for _, id := range []string{"old", "new"} {
		for n := 1; n <= 3; n++ {
			_, err := b.db.Exec(b.ctx, `INSERT INTO job_attempts (tenant, job_id, seq, attempt, model, started_at)
				VALUES ('acme', $1, $2, $2, 'big', now())`, id, n)
			require.NoError(t, err)
		}
	}
	pruned, err := b.store.Prune(b.ctx, store.Retention{Jobs: map[llmq.Status]time.Duration{llmq.StatusSucceeded: 24 * time.Hour}})
	require.NoError(t, err)
	require.Equal(t, int64(1), pruned["jobs"])
	require.Equal(t, []string{"new", "new", "new"}, b.ids(t, `SELECT job_id FROM job_attempts ORDER BY job_id, seq`))
}
