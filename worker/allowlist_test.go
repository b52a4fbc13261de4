package worker_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/worker"
)

// metricsText is what /metrics would serve of reg.
func metricsText(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	var buf bytes.Buffer
	for _, f := range families {
		_, err := expfmt.MetricFamilyToText(&buf, f)
		require.NoError(t, err)
	}
	return buf.String()
}

// labelled counts the goroutines whose profile label "test" is name.
func labelled(t *testing.T, name string) int {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, pprof.Lookup("goroutine").WriteTo(&buf, 1))
	n, count := 0, 0
	for _, line := range strings.Split(buf.String(), "\n") {
		if _, err := fmt.Sscanf(line, "%d @", &count); err == nil {
			continue
		}
		if strings.HasPrefix(line, "# labels:") && strings.Contains(line, fmt.Sprintf(`"test":%q`, name)) {
			n += count
		}
	}
	return n
}

// TestWorkerRefusesModelsTheCatalogDoesNotAllow: with a catalog that lists
// one model, 1,000 jobs naming 1,000 other models of 8 KB each (and one
// naming an unlisted fallback) are dead-lettered with model_not_allowed at
// ingest, and a job recorded by another path with such a model when it is
// claimed: none is called, no lane (the worker's goroutine per model) is
// created, /metrics gains no model label.
func TestWorkerRefusesModelsTheCatalogDoesNotAllow(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 51})
	reg := prometheus.NewRegistry()
	// The worker's goroutines carry a label, so they are counted apart
	// from the other tests'.
	var w *worker.Worker
	pprof.Do(context.Background(), pprof.Labels("test", t.Name()), func(context.Context) {
		w = tb.start(t, func(c *worker.Config) {
			c.Catalog = llmq.Catalog{Models: map[string]llmq.Model{"gpt-4o-mini": {}}}
			c.Registerer = reg
		})
	})
	tb.publish(t, jobJSON("ok-1", "gpt-4o-mini", ""))
	require.Equal(t, llmq.StatusSucceeded, tb.waitTerminal(t, []string{"ok-1"}, 20*time.Second)["ok-1"].Status)
	// The baseline has the lane's gauges (set every second).
	require.Eventually(t, func() bool {
		return strings.Contains(metricsText(t, reg), `llmq_capacity_health{entry="",model="gpt-4o-mini"}`)
	},
		5*time.Second, 10*time.Millisecond)
	goroutines, metrics := labelled(t, t.Name()), metricsText(t, reg)
	require.Positive(t, goroutines)

	var ids []string
	var values [][]byte
	for i := range 1000 {
		id := fmt.Sprintf("bad-%04d", i)
		ids = append(ids, id)
		values = append(values, jobJSON(id, fmt.Sprintf("m%04d-", i)+strings.Repeat("x", 8<<10), ""))
	}
	ids = append(ids, "bad-fallback")
	values = append(values, jobJSON("bad-fallback", "gpt-4o-mini", `,"fallback_models":["gpt-4o-mini","unlisted"]`))
	tb.publish(t, values...)
	recorded, err := llmq.Decode(jobJSON("recorded", "recorded-elsewhere", ""), llmq.DecodeOptions{})
	require.NoError(t, err)
	_, err = tb.store.Queue().Ingest(context.Background(), []store.NewJob{{Job: recorded}})
	require.NoError(t, err)
	ids = append(ids, "recorded")

	require.Eventually(t, func() bool { return len(tb.letters.all()) >= len(ids) }, slowdown*20*time.Second, 10*time.Millisecond)
	letters := tb.letters.all()
	byID := map[string]dlq.Letter{}
	for _, l := range letters {
		byID[l.JobID] = l
		require.Equal(t, dlq.ReasonModelNotAllowed, l.Reason, l.JobID)
	}
	require.Len(t, byID, len(ids))
	require.True(t, strings.HasPrefix(byID["bad-0007"].LastError, `invalid job: body.model: model "m0007-xxxx`), byID["bad-0007"].LastError)
	require.Equal(t, `invalid job: fallback_models[1]: model "unlisted" is not one this service runs; allowed: gpt-4o-mini`, byID["bad-fallback"].LastError)
	require.Equal(t, `invalid job: body.model: model "recorded-elsewhere" is not one this service runs; allowed: gpt-4o-mini`, byID["recorded"].LastError)
	require.Equal(t, 2, tb.count(t, "true"), "a refused message is a letter, never a job")
	require.Equal(t, llmq.StatusDeadLettered, tb.get(t, "recorded").Status)
	require.EqualValues(t, 1, tb.sim.Sim.Stats().Total.Accepted, "no refused job was called")

	require.Equal(t, []string{"gpt-4o-mini"}, w.Lanes())
	require.Equal(t, goroutines, labelled(t, t.Name()), "the worker's goroutines stay flat")
	after := metricsText(t, reg)
	require.NotContains(t, after, "xxxx")
	require.NotContains(t, after, "recorded-elsewhere")
	require.NotContains(t, after, "unlisted")
	require.Less(t, len(after), len(metrics)+1024, "/metrics stays flat: %d bytes, then %d", len(metrics), len(after))
	require.Contains(t, after, `llmq_dead_letters_total{reason="model_not_allowed"} 1002`)
}

// TestWorkerRefusesUnknownProjects: a message naming a project its tenant
// does not list is dead-lettered with unknown_project at ingest, never
// recorded or called; the tenant's jobs of a listed project, or of none,
// run.
func TestWorkerRefusesUnknownProjects(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 52})
	tb.start(t, func(c *worker.Config) {
		c.Tenants = llmq.Tenants{llmq.DefaultTenant: {Projects: map[string]llmq.Scope{"support": {}}}}
	})
	tb.publish(t, jobJSON("listed", "gpt-4o-mini", `,"project":"support"`), jobJSON("unknown", "gpt-4o-mini", `,"project":"other"`),
		jobJSON("none", "gpt-4o-mini", ""))
	done := tb.waitTerminal(t, []string{"listed", "none"}, 20*time.Second)
	require.Equal(t, llmq.StatusSucceeded, done["listed"].Status)
	require.Equal(t, llmq.StatusSucceeded, done["none"].Status)
	require.Eventually(t, func() bool { return len(tb.letters.all()) == 1 }, slowdown*20*time.Second, 10*time.Millisecond)
	l := tb.letters.all()[0]
	require.Equal(t, "unknown", l.JobID)
	require.Equal(t, dlq.ReasonUnknownProject, l.Reason)
	require.Equal(t, `invalid job: project: tenant "default" has no project "other"; its projects: support`, l.LastError)
	require.Equal(t, 0, tb.count(t, "id = 'unknown'"), "a refused message is a letter, never a job")
	require.EqualValues(t, 2, tb.sim.Sim.Stats().Total.Accepted)
}
