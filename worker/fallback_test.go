package worker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/worker"
)

// TestWorkerFallbackOnAndRetriesCount: a model that always answers 500,
// with a fallback model. By default (FallbackOn [rate_limit]) the job stays
// on it for its MaxAttempts calls and is dead-lettered; with FallbackOn
// [server_error] it moves on after FallbackAfter calls. llmq_retries_total
// counts the retries made, exactly: not the failure that ends the job or
// moves it on.
func TestWorkerFallbackOnAndRetriesCount(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		fallbackOn []worker.FallbackTrigger
		status     llmq.Status
		calls      map[string]int64
		series     []string
		absent     []string
	}{
		{name: "default: 5xx retried on the model", status: llmq.StatusDeadLettered,
			calls:  map[string]int64{"broken": 4},
			series: []string{`llmq_retries_total{model="broken"} 3`},
			absent: []string{`llmq_retries_total{model="backup"}`, `llmq_fallbacks_total`}},
		{name: "fallback_on server_error: moved on after FallbackAfter", fallbackOn: []worker.FallbackTrigger{worker.FallbackOnServerError},
			status: llmq.StatusSucceeded,
			calls:  map[string]int64{"broken": 2, "backup": 1},
			series: []string{`llmq_retries_total{model="broken"} 1`, `llmq_fallbacks_total{from="broken",to="backup"} 1`},
			absent: []string{`llmq_retries_total{model="backup"}`}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t, upstreamsim.Config{Seed: 61 + uint64(i), Faults: upstreamsim.FaultConfig{
				Rates: map[upstreamsim.FaultKind]float64{upstreamsim.FaultServerError: 1}, Models: []string{"broken"}}})
			reg := prometheus.NewRegistry()
			tb.start(t, func(c *worker.Config) {
				c.Registerer = reg
				c.MaxAttempts, c.FallbackAfter, c.FallbackOn = 4, 2, tt.fallbackOn
			})
			tb.publish(t, jobJSON("j", "broken", `,"fallback_models":["backup"]`))
			rec := tb.waitTerminal(t, []string{"j"}, 30*time.Second)["j"]
			require.Equal(t, tt.status, rec.Status)
			if tt.status == llmq.StatusDeadLettered {
				require.Equal(t, dlq.ReasonRetriesExhausted, tb.letters.wait(t, 1)[0].Reason)
			}
			stats := tb.sim.Sim.Stats()
			calls := map[string]int64{}
			for model, s := range stats.Models {
				calls[model] = s.Accepted
			}
			require.Equal(t, tt.calls, calls)
			text := metricsText(t, reg)
			for _, s := range tt.series {
				require.Contains(t, text, s+"\n")
			}
			for _, s := range tt.absent {
				require.NotContains(t, text, s)
			}
		})
	}
}

// TestWorkerFallsBackWhenTheLaneWouldHoldIt: the primary's quota is known
// (1 RPM, as the server's headers confirm), so the lane itself holds a
// second job a minute without a single 429; jobs with a fallback move to it after FallbackMaxWait at most, not
// only after 429s or a 429 pause (the fallback bench scenario: other
// clients drain the primary's buckets, whose level the worker learns from
// the headers, and the jobs waited in its lane to the end of the run).
func TestWorkerFallsBackWhenTheLaneWouldHoldIt(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 67,
		Models: map[string]upstreamsim.ModelConfig{"primary": {Limits: upstreamsim.Limits{RPM: 1, TPM: -1}}}})
	tb.start(t, func(c *worker.Config) {
		c.Catalog = llmq.Catalog{Models: map[string]llmq.Model{"primary": {RPM: 1}, "backup": {}}}
		c.Strategy, c.FallbackMaxWait = "", 2*time.Second // shape: the quota is known
	})
	ids := []string{"held-1", "held-2", "held-3", "held-4"}
	for _, id := range ids {
		tb.publish(t, jobJSON(id, "primary", `,"fallback_models":["backup"]`))
	}
	recs := tb.waitTerminal(t, ids, 20*time.Second) // the primary would take three minutes
	used := map[string]int{}
	for _, id := range ids {
		require.Equal(t, llmq.StatusSucceeded, recs[id].Status, id)
		require.Equal(t, 1, recs[id].Attempts, "%s: one call, on the model that served it", id)
		used[recs[id].UsedModel]++
	}
	require.Equal(t, map[string]int{"primary": 1, "backup": 3}, used)
	stats := tb.sim.Sim.Stats().Models
	require.EqualValues(t, 1, stats["primary"].Accepted)
	require.Empty(t, stats["primary"].RateLimited, "the lane held the jobs: no 429")
}

// TestWorkerFallsBackWhenTheTPMIsSpent: the primary's minute of tokens is
// spent (its headers say so), so its buckets would hold the next jobs for
// longer than FallbackMaxWait: those with a fallback are claimed to move
// on, although the buckets hold none of their tokens (the bench's fallback
// scenario, where other clients drain the primary's TPM).
func TestWorkerFallsBackWhenTheTPMIsSpent(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 68,
		Models: map[string]upstreamsim.ModelConfig{"primary": {Limits: upstreamsim.Limits{RPM: -1, TPM: 600}}},
		Output: upstreamsim.OutputConfig{Distribution: upstreamsim.DistFixed, Min: 1, Max: 1 << 20, Mean: 1 << 20},
	})
	tb.start(t, func(c *worker.Config) {
		c.Catalog = llmq.Catalog{Models: map[string]llmq.Model{"primary": {TPM: 600}, "backup": {}}}
		c.Strategy, c.FallbackMaxWait = "", 2*time.Second // shape: the quota is known
	})
	tb.publish(t, []byte(`{"id":"spender","body":{"model":"primary","max_tokens":550,"messages":[{"role":"user","content":"Hello world"}]}}`))
	require.Equal(t, "primary", tb.waitTerminal(t, []string{"spender"}, 10*time.Second)["spender"].UsedModel)
	ids := []string{"moved-1", "moved-2", "moved-3"}
	for _, id := range ids {
		tb.publish(t, []byte(fmt.Sprintf(`{"id":%q,"fallback_models":["backup"],"body":{"model":"primary","max_tokens":100,"messages":[{"role":"user","content":"Hello world"}]}}`, id)))
	}
	// The primary refills 10 tokens a second: each of them would wait
	// about 11 s for it.
	recs := tb.waitTerminal(t, ids, 10*time.Second)
	for _, id := range ids {
		require.Equal(t, llmq.StatusSucceeded, recs[id].Status, id)
		require.Equal(t, "backup", recs[id].UsedModel, id)
	}
	require.Empty(t, tb.sim.Sim.Stats().Models["primary"].RateLimited, "the lane held the jobs: no 429")
}

// TestWorkerFallbackNotFoundDoesNotFailTheJob: the configured fallback of a
// model is a typo the provider answers 404 model_not_found for. Jobs the
// primary's lane would hold move to it, are answered 404 and go back to
// the primary, which serves every one of them; once the worker knows the
// fallback is not served no other job moves to it. (Before, each of them
// failed with 404.)
func TestWorkerFallbackNotFoundDoesNotFailTheJob(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 69, RestrictModels: true,
		Models: map[string]upstreamsim.ModelConfig{"primary": {Limits: upstreamsim.Limits{RPM: -1, TPM: -1}}}})
	clock := clockwork.NewFakeClock()
	tb.start(t, func(c *worker.Config) {
		c.Catalog = llmq.Catalog{Models: map[string]llmq.Model{"primary": {RPM: 6, Fallbacks: []string{"primary-typo"}}}}
		c.Clock, c.Strategy, c.FallbackMaxWait = clock, "", 2*time.Second // shape: one job every 10 s
	})
	runClock(t, clock, 10*time.Millisecond)
	ids := []string{"nf-1", "nf-2", "nf-3", "nf-4"}
	for _, id := range ids {
		tb.publish(t, jobJSON(id, "primary", ""))
	}
	recs := tb.waitTerminal(t, ids, time.Minute)
	for _, id := range ids {
		require.Equal(t, llmq.StatusSucceeded, recs[id].Status, "%s: %s", id, recs[id].ErrorMessage)
		require.Equal(t, "primary", recs[id].UsedModel, id)
	}
	stats := tb.sim.Sim.Stats().Models
	require.EqualValues(t, len(ids), stats["primary"].Accepted)
	require.Positive(t, stats["primary-typo"].Invalid, "the fallback was tried")
	require.LessOrEqual(t, stats["primary-typo"].Invalid, int64(len(ids)-1), "by the jobs that moved before its first 404")

	// Known unserved: a job the lane would hold waits for the primary.
	tb.publish(t, jobJSON("nf-5", "primary", ""))
	require.Equal(t, llmq.StatusSucceeded, tb.waitTerminal(t, []string{"nf-5"}, time.Minute)["nf-5"].Status)
	require.Equal(t, stats["primary-typo"].Invalid, tb.sim.Sim.Stats().Models["primary-typo"].Invalid)
}
