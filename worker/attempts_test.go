package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/worker"
)

var (
	reply429 = worker.Reply{Outcome: worker.Outcome{Class: worker.ClassRateLimited, Status: 429, Code: "rate_limit_exceeded",
		Message: "slow down", Headers: shaping.RateLimitHeaders{RetryAfter: 2 * time.Millisecond, HasRetryAfter: true,
			LimitRequests: 60, HasLimitRequests: true}}}
	reply500 = worker.Reply{Outcome: worker.Outcome{Class: worker.ClassRetryable, Status: 500, Code: "server_error", Message: "oops"}}
	reply200 = worker.Reply{Outcome: worker.Outcome{Class: worker.ClassSuccess, Status: 200}, Body: []byte(`{}`),
		PromptTokens: 7, CompletionTokens: 5}
)

// attemptRows is the (model, status, outcome) of each recorded call of
// job id.
func (tb *testBundle) attemptRows(t *testing.T, id string) [][3]any {
	t.Helper()
	as, err := tb.store.Jobs().Attempts(context.Background(), "default", id)
	require.NoError(t, err)
	var out [][3]any
	for _, a := range as {
		require.NotNil(t, a.FinishedAt, "call %d has its answer", a.Seq)
		out = append(out, [3]any{a.Model, a.Status, a.Outcome})
	}
	return out
}

// TestWorkerRecordsEveryAttempt: each call of a job is a row of
// job_attempts with its answer, whichever write follows it: two 429s then
// a success (MarkRetrying, StoreResult), a fallback (the next
// MarkCalling), retries exhausted (a statement of its own before the dead
// letter).
func TestWorkerRecordsEveryAttempt(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 31})
	retried := &scripted{replies: []worker.Reply{reply429, reply429, reply200}}
	w := tb.start(t, func(c *worker.Config) { c.Upstream = retried })
	tb.publish(t, jobJSON("retried", "m", ""))
	rec := tb.waitTerminal(t, []string{"retried"}, 10*time.Second)["retried"]
	require.Equal(t, llmq.StatusSucceeded, rec.Status)
	require.Equal(t, [][3]any{{"m", 429, "rate_limited"}, {"m", 429, "rate_limited"}, {"m", 200, "success"}},
		tb.attemptRows(t, "retried"))
	as, err := tb.store.Jobs().Attempts(context.Background(), "default", "retried")
	require.NoError(t, err)
	require.Equal(t, 2*time.Millisecond, *as[0].RetryAfter)
	require.Zero(t, as[0].Backoff, "the first call waited no backoff")
	require.Positive(t, as[1].Backoff, "the second call waited out the first 429")
	require.Equal(t, []int{0, 0, 7}, []int{as[0].PromptTokens, as[1].PromptTokens, as[2].PromptTokens})
	stopWorker(t, w)

	fellBack := &scripted{replies: []worker.Reply{reply429, reply200}}
	w = tb.start(t, func(c *worker.Config) { c.Upstream, c.FallbackAfter = fellBack, 1 })
	tb.publish(t, jobJSON("fell-back", "m", `,"fallback_models":["backup"]`))
	rec = tb.waitTerminal(t, []string{"fell-back"}, 10*time.Second)["fell-back"]
	require.Equal(t, "backup", rec.UsedModel)
	require.Equal(t, [][3]any{{"m", 429, "rate_limited"}, {"backup", 200, "success"}}, tb.attemptRows(t, "fell-back"))
	stopWorker(t, w)

	broken := &scripted{replies: []worker.Reply{reply500}}
	tb.start(t, func(c *worker.Config) { c.Upstream, c.MaxAttempts = broken, 2 })
	tb.publish(t, jobJSON("exhausted", "m", ""))
	rec = tb.waitTerminal(t, []string{"exhausted"}, 10*time.Second)["exhausted"]
	require.Equal(t, llmq.StatusDeadLettered, rec.Status)
	require.Equal(t, [][3]any{{"m", 500, "retryable"}, {"m", 500, "retryable"}}, tb.attemptRows(t, "exhausted"))

	stats, err := tb.store.Jobs().ModelStats(context.Background(), "", time.Now().Add(-time.Hour))
	require.NoError(t, err)
	var requests, limited int64
	for _, m := range stats {
		for _, min := range m.Minutes {
			requests, limited = requests+min.Requests, limited+min.RateLimited
		}
	}
	require.Equal(t, int64(7), requests)
	require.Equal(t, int64(3), limited)
}

func stopWorker(t *testing.T, w *worker.Worker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, w.Stop(ctx))
}
