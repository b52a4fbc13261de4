package worker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/worker"
)

// TestWorkerLearnsProviderConcurrency: a burst of jobs for a model of which
// nothing is configured, on a provider that takes 4 calls at a time and
// says so only in its 429s (the simulator): the lane starts slow and learns
// the limit from the first such 429s, so every job succeeds and the
// provider refuses at most two calls (the slow start's last step, with
// answers racing), where a lane of 16 calls would meet a dozen refusals
// (docs/design/rate-limiting.md#calls-at-a-time).
func TestWorkerLearnsProviderConcurrency(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{
		Models: map[string]upstreamsim.ModelConfig{"gpt-4o-mini": {Limits: upstreamsim.Limits{
			RPM: 6000, TPM: 1e7, MaxConcurrency: 4}}},
		Latency: upstreamsim.LatencyConfig{TTFT: 150 * time.Millisecond, PerToken: time.Millisecond},
	})
	tb.start(t, func(c *worker.Config) { c.Strategy = "" })
	const n = 32
	ids := make([]string, n)
	msgs := make([][]byte, n)
	for i := range n {
		ids[i] = fmt.Sprintf("busy-%d", i)
		msgs[i] = jobJSON(ids[i], "gpt-4o-mini", "")
	}
	tb.publish(t, msgs...)
	for id, rec := range tb.waitTerminal(t, ids, 60*time.Second) {
		require.Equal(t, llmq.StatusSucceeded, rec.Status, id)
	}
	st := tb.sim.Sim.Stats().Models["gpt-4o-mini"]
	t.Logf("%d jobs, provider 429s %v", n, st.RateLimited)
	require.LessOrEqual(t, st.RateLimited["concurrency"], int64(2))
}
