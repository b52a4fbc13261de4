package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
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

// records keeps the log records of a level and above.
type records struct {
	level slog.Level
	mu    sync.Mutex
	got   []slog.Record
}

func (r *records) Enabled(_ context.Context, l slog.Level) bool { return l >= r.level }
func (r *records) WithAttrs([]slog.Attr) slog.Handler           { return r }
func (r *records) WithGroup(string) slog.Handler                { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, rec)
	return nil
}

func (r *records) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.got {
		out = append(out, rec.Level.String()+" "+rec.Message)
	}
	return out
}

// rekeyed calls the upstream of the key in force.
type rekeyed struct {
	up    atomic.Pointer[worker.Upstream]
	calls atomic.Int32
}

func (r *rekeyed) Call(ctx context.Context, model string, body []byte) worker.Reply {
	r.calls.Add(1)
	return (*r.up.Load()).Call(ctx, model, body)
}

// TestWorkerHoldsTheLaneWhileTheKeyIsRefused: the provider refuses the
// worker's key (401) for a minute of the worker's clock under 20 jobs: no
// job fails, the worker logs one ERROR and counts one unauthorized
// incident (the LLMQUpstreamKeyRefused alert), and calls only its probes.
// Once the key is accepted every job succeeds. (Before, every job failed
// with 401, logged at INFO.)
func TestWorkerHoldsTheLaneWhileTheKeyIsRefused(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 47, APIKeys: []string{"sk-good"}})
	up := &rekeyed{}
	wrong := worker.OpenAIUpstream(worker.NewOpenAIClient(worker.UpstreamConfig{BaseURL: tb.sim.URL, APIKey: "sk-wrong"}), worker.ProviderOpenAI)
	up.up.Store(&wrong)
	clock := clockwork.NewFakeClock()
	logs := &records{level: slog.LevelInfo}
	reg := prometheus.NewRegistry()
	tb.start(t, func(c *worker.Config) { c.Upstream, c.Clock, c.Logger, c.Registerer = up, clock, slog.New(logs), reg })
	runClock(t, clock, 10*time.Millisecond)
	ids := make([]string, 20)
	values := make([][]byte, len(ids))
	for i := range ids {
		ids[i] = fmt.Sprintf("key-%02d", i)
		values[i] = jobJSON(ids[i], "m", "")
	}
	tb.publish(t, values...)
	require.Eventually(t, func() bool { return up.calls.Load() > 0 }, 30*time.Second, time.Millisecond)
	first := clock.Now()
	require.Eventually(t, func() bool { return clock.Since(first) >= time.Minute }, time.Minute, time.Millisecond)
	require.Zero(t, tb.count(t, `status NOT IN ('queued', 'running', 'retrying')`), "no job ended")
	var errs []string
	for _, m := range logs.messages() {
		if m[:5] == "ERROR" {
			errs = append(errs, m)
		}
	}
	require.Equal(t, []string{"ERROR provider refuses the API key (HTTP 401): holding the model's jobs and probing; check the key (OPENAI_API_KEY)"}, errs)
	require.NotContains(t, fmt.Sprint(logs.messages()), "job failed")
	incidents, err := reg.Gather()
	require.NoError(t, err)
	var unauthorized float64
	for _, mf := range incidents {
		if mf.GetName() == "llmq_upstream_incidents_total" {
			for _, m := range mf.GetMetric() {
				unauthorized += m.GetCounter().GetValue()
			}
		}
	}
	require.Equal(t, 1.0, unauthorized)
	// The calls admitted before the first 401 came back (one per job at
	// most), then a probe every 15 s.
	require.LessOrEqual(t, up.calls.Load(), int32(len(ids)+5))

	good := worker.OpenAIUpstream(worker.NewOpenAIClient(worker.UpstreamConfig{BaseURL: tb.sim.URL, APIKey: "sk-good"}), worker.ProviderOpenAI)
	up.up.Store(&good)
	recs := tb.waitTerminal(t, ids, time.Minute)
	for _, id := range ids {
		require.Equal(t, llmq.StatusSucceeded, recs[id].Status, "%s: %s", id, recs[id].ErrorMessage)
	}
}
