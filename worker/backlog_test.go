package worker_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/worker"
)

// backlogHeapGrowth bounds the worker's heap growth from a backlog of
// 10,000 queued jobs to one of 100,000: a worker that read the backlog's
// rows (90,000 more of about 500 bytes) would grow by some 45 MB.
const backlogHeapGrowth = 8 << 20

// TestWorkerMemoryIsFlatOverABacklog: with 10,000 and then 100,000 jobs
// queued in Postgres (recorded by the API's outbox, say) and a quota that
// lets the worker run a few of them, the worker claims what its lane can
// take, counts the ingest window up to the window, and its heap stays
// where it was.
func TestWorkerMemoryIsFlatOverABacklog(t *testing.T) {
	if testing.Short() {
		t.Skip("records 100,000 jobs in Postgres")
	}
	tb := setup(t, upstreamsim.Config{Seed: 41, Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: -1, TPM: -1}}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	queue := func(from, to int) {
		_, err := tb.store.Pool().Exec(ctx, `INSERT INTO jobs (tenant, id, status, priority, requested_model, body,
				created_at, updated_at, sched_key, est_prompt_tokens, est_output_tokens)
			SELECT 't' || (g % 10), 'backlog-' || g, 'queued', 'normal', 'gpt-4o-mini',
				jsonb_build_object('model', 'gpt-4o-mini', 'max_tokens', 32, 'messages',
					jsonb_build_array(jsonb_build_object('role', 'user', 'content', repeat('Summarise this sentence. ', 8) || g))),
				now(), now(), now(), 60, 32
			FROM generate_series($1::int, $2::int) g`, from, to)
		require.NoError(t, err)
		_, err = tb.store.Pool().Exec(ctx, `ANALYZE jobs`)
		require.NoError(t, err)
	}
	queue(1, 10_000)
	tb.start(t, func(c *worker.Config) {
		// 600 calls a minute: the lane claims about a second's worth.
		c.Strategy = shaping.StrategyRPM
		c.Catalog.Default = llmq.Model{RPM: 600}
	})
	heap := func() uint64 {
		// The worker runs steadily: succeeded jobs grow, queued shrink.
		done := tb.count(t, `status = 'succeeded'`)
		require.Eventually(t, func() bool { return tb.count(t, `status = 'succeeded'`) >= done+20 }, time.Minute, 10*time.Millisecond)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	heap() // warm: lanes, connections, buffers
	at10k := heap()
	queue(10_001, 100_000)
	heap()
	at100k := heap()
	t.Logf("heap in use: %d KiB at 10k queued, %d KiB at 100k", at10k>>10, at100k>>10)
	require.Less(t, int64(at100k)-int64(at10k), int64(backlogHeapGrowth), fmt.Sprintf("heap grew from %d to %d bytes", at10k, at100k))
	require.Greater(t, tb.count(t, `status = 'queued'`), 90_000, "the backlog stays queued in Postgres")
}
