package worker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/worker"
)

// incidentUpstream answers 503 to its first down calls, then succeeds: a provider
// incident that ends.
type incidentUpstream struct {
	mu    sync.Mutex
	down  int
	calls int
}

func (o *incidentUpstream) Call(context.Context, string, []byte) worker.Reply {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	if o.calls <= o.down {
		return worker.Reply{Outcome: worker.Outcome{Class: worker.ClassRetryable, Status: 503,
			Code: "server_error", Message: "HTTP 503: down"}}
	}
	return worker.Reply{Outcome: worker.Outcome{Class: worker.ClassSuccess, Status: 200},
		Body: []byte(`{"object":"chat.completion"}`), PromptTokens: 1, CompletionTokens: 1}
}

// TestWorkerHoldsTheLaneThroughAProviderIncident: the provider fails 20
// calls in a row, more than the 3 jobs' retry schedules hold together (3
// attempts each). Once most calls fail, the lane holds its jobs and probes
// one at a time; failed probes cost no job an attempt, so when the
// provider is back every job succeeds, none dead-lettered. (Planted: with
// IncidentMinCalls -1 every job is dead-lettered after 3 attempts; with
// failed probes counted, a job is dead-lettered after its third probe.)
func TestWorkerHoldsTheLaneThroughAProviderIncident(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 41})
	up := &incidentUpstream{down: 20}
	tb.start(t, func(c *worker.Config) {
		c.Upstream, c.MaxAttempts = up, 3
		c.Backoff = worker.Backoff{Base: 50 * time.Millisecond, Max: 100 * time.Millisecond}
		c.IncidentMinCalls, c.IncidentWindow, c.IncidentProbeEvery = 3, 10*time.Second, 20*time.Millisecond
	})
	ids := make([]string, 3)
	values := make([][]byte, len(ids))
	for i := range ids {
		ids[i] = fmt.Sprintf("incident-%02d", i)
		values[i] = jobJSON(ids[i], "m", "")
	}
	tb.publish(t, values...)
	recs := tb.waitTerminal(t, ids, 60*time.Second)
	for _, id := range ids {
		require.Equal(t, llmq.StatusSucceeded, recs[id].Status, "%s: %s", id, recs[id].ErrorMessage)
	}
	require.Equal(t, 23, up.calls, "20 failures (3 before the breaker opened, 17 probes), then 3 answers")
}
