package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/worker"
)

// TestIngestTenantFlood floods one tenant through RabbitMQ: 50 jobs of
// "flood", then 5 of "calm" behind them in the queue. The ingest window
// (10) does not pause for flood, which holds more than its share of it (5,
// soft by the 2 messages two ingest loops of batches of 1 hold in hand):
// its jobs are recorded up to its cap (30), the 20 past it dead-lettered
// tenant_queue_full, and calm's jobs are recorded and claimed by fair
// share meanwhile: they all finish while most of flood's still wait (each
// call takes 300 ms, two at a time). Before, ingestion paused at 10 queued
// jobs of flood and calm's waited behind all 50.
func TestIngestTenantFlood(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 32, Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: -1, TPM: -1}},
		Latency: upstreamsim.LatencyConfig{TTFT: 300 * time.Millisecond}})
	var values [][]byte
	for i := range 50 {
		values = append(values, jobJSON(fmt.Sprintf("flood-%02d", i), "gpt-4o-mini", `,"tenant":"flood"`))
	}
	for i := range 5 {
		values = append(values, jobJSON(fmt.Sprintf("calm-%d", i), "gpt-4o-mini", `,"tenant":"calm"`))
	}
	tb.publish(t, values...)
	tb.start(t, func(c *worker.Config) { c.IngestWindow, c.TenantCap, c.MaxInFlight, c.IngestBatch = 10, 30, 2, 1 })

	require.Eventually(t, func() bool { return tb.count(t, `tenant = 'calm' AND status = 'succeeded'`) == 5 },
		30*time.Second, 10*time.Millisecond, "calm's jobs run")
	// Every flood message ends once, as a job or a dead letter: the jobs
	// recorded up to its cap of 30 queued or in flight (more as its
	// first jobs finish), the others dead-lettered.
	require.Eventually(t, func() bool {
		return tb.count(t, `tenant = 'flood'`)+len(tb.letters.all()) == 50
	}, 30*time.Second, 10*time.Millisecond, "every flood message handled")
	recorded, letters := tb.count(t, `tenant = 'flood'`), tb.letters.all()
	require.GreaterOrEqual(t, recorded, 30, "recorded up to the cap")
	require.NotEmpty(t, letters, "past the cap: dead-lettered")
	for _, l := range letters {
		require.Equal(t, dlq.ReasonTenantQueueFull, l.Reason, l.JobID)
		require.Equal(t, "flood", l.Tenant)
		require.Regexp(t, `^tenant "flood" holds \d+ jobs queued or in flight, its cap \(ingest.tenant_cap 30\)$`, l.LastError)
	}
	require.Eventually(t, func() bool { return tb.count(t, `tenant = 'flood' AND status = 'succeeded'`) == recorded },
		60*time.Second, 10*time.Millisecond, "flood's recorded jobs run too")
	var after int
	require.NoError(t, tb.store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM jobs WHERE tenant = 'flood'
		AND started_at > (SELECT max(finished_at) FROM jobs WHERE tenant = 'calm')`).Scan(&after))
	require.GreaterOrEqual(t, after, 15, "most of flood's jobs started after calm's had all finished")
}
