package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/worker"
)

// TestWorkerClaimsJobsRecordedElsewhere: a job recorded by another path
// (the API's outbox, another replica's ingest) is claimed as it is
// recorded, woken by its notification: on a clock that never moves, no
// claim tick and no refresh of the queued models ever comes, and the job
// still runs to success.
func TestWorkerClaimsJobsRecordedElsewhere(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 1})
	tb.start(t, func(c *worker.Config) {
		c.Clock = clockwork.NewFakeClock()
		c.Queued = tb.store.Queue()
	})
	// Once the worker listens: a job recorded before is claimed by the
	// first round, which proves nothing.
	require.Eventually(t, func() bool {
		var n int
		err := tb.store.Pool().QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%llmq_job_queued%'`).Scan(&n)
		return err == nil && n > 0
	}, 10*time.Second, 10*time.Millisecond)
	j, err := llmq.Decode(jobJSON("elsewhere", "gpt-4o-mini", ""), llmq.DecodeOptions{})
	require.NoError(t, err)
	created, err := tb.store.Jobs().Insert(context.Background(), j)
	require.NoError(t, err)
	require.True(t, created)
	rec := tb.waitTerminal(t, []string{"elsewhere"}, 10*time.Second)["elsewhere"]
	require.Equal(t, llmq.StatusSucceeded, rec.Status)
}
