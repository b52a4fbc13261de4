package app_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/app"
	"github.com/llmq/llmq/internal/upstreamsim"
)

// family is one metric family as docs/metrics.md lists it.
type family struct {
	typ    string
	labels string // sorted, comma-separated
}

// recorder is a Registerer that notes every family registered with it.
type recorder struct {
	mu       sync.Mutex
	families map[string]family
}

func (r *recorder) Register(c prometheus.Collector) error {
	typ := "untyped"
	switch c.(type) {
	case *prometheus.CounterVec:
		typ = "counter"
	case *prometheus.GaugeVec:
		typ = "gauge"
	case *prometheus.HistogramVec, prometheus.Histogram:
		typ = "histogram"
	case prometheus.Gauge: // before Counter: a Gauge has Inc and Add too
		typ = "gauge"
	case prometheus.Counter:
		typ = "counter"
	}
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	r.mu.Lock()
	defer r.mu.Unlock()
	for d := range ch {
		s := d.String()
		name, err := strconv.Unquote(regexp.MustCompile(`fqName: ("(?:[^"\\]|\\.)*")`).FindStringSubmatch(s)[1])
		if err != nil {
			return err
		}
		labels := strings.Split(regexp.MustCompile(`variableLabels: \{([^}]*)\}\}$`).FindStringSubmatch(s)[1], ",")
		labels = slices.DeleteFunc(labels, func(l string) bool { return l == "" })
		slices.Sort(labels)
		r.families[name] = family{typ: typ, labels: strings.Join(labels, ",")}
	}
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *recorder) Unregister(prometheus.Collector) bool { return false }

// documented reads the families of docs/metrics.md: rows
// | `name` | type | `label`, ... | meaning |.
func documented(t *testing.T) map[string]family {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	require.NoError(t, err)
	out := map[string]family{}
	row := regexp.MustCompile("(?m)^\\| `(llmq_[a-z_]+)` \\| ([a-z]+) \\|\\s*([^|]*?)\\s*\\|")
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		var labels []string
		for _, l := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(m[3], -1) {
			labels = append(labels, l[1])
		}
		slices.Sort(labels)
		require.NotContains(t, out, m[1], "docs/metrics.md lists %s twice", m[1])
		out[m[1]] = family{typ: m[2], labels: strings.Join(labels, ",")}
	}
	return out
}

// TestMetricsDocMatchesTheRegistries builds every part that exports
// metrics (a worker with its batch lane, dead-letter writer and alerts, the
// API, a producer without a worker, the simulator) and checks that
// docs/metrics.md lists exactly their llmq_ families, with their types and
// labels.
func TestMetricsDocMatchesTheRegistries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec := &recorder{families: map[string]family{}}
	s := settings(t)
	s.Alerts.AlertmanagerURL, s.Alerts.WebhookURL = "http://127.0.0.1:1", "http://127.0.0.1:1/hook"
	full, err := app.New(ctx, app.Config{Settings: s, Logger: quiet, Registerer: rec,
		Worker: &app.WorkerConfig{}, API: &app.APIConfig{Listen: "127.0.0.1:0"}})
	require.NoError(t, err)
	require.NoError(t, full.Stop(ctx))
	apiOnly, err := app.New(ctx, app.Config{Settings: settings(t), Logger: quiet, Registerer: rec,
		API: &app.APIConfig{Listen: "127.0.0.1:0"}})
	require.NoError(t, err)
	require.NoError(t, apiOnly.Stop(ctx))
	_, err = upstreamsim.New(upstreamsim.Config{}, upstreamsim.WithRegisterer(rec))
	require.NoError(t, err)

	got := map[string]family{}
	for name, f := range rec.families {
		if strings.HasPrefix(name, "llmq_") {
			got[name] = f
		}
	}
	want := documented(t)
	var diff []string
	for _, name := range slices.Sorted(maps.Keys(got)) {
		if w, ok := want[name]; !ok || w != got[name] {
			diff = append(diff, fmt.Sprintf("exported: | `%s` | %s | %s |", name, got[name].typ, got[name].labels))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[name]; !ok || g != want[name] {
			diff = append(diff, fmt.Sprintf("documented: | `%s` | %s | %s |", name, want[name].typ, want[name].labels))
		}
	}
	require.Empty(t, diff, "docs/metrics.md and the registries differ:\n%s", strings.Join(diff, "\n"))
	for _, prefix := range []string{"llmq_batch_", "llmq_dlq_", "llmq_alerts_", "llmq_api_", "llmq_producer_", "llmq_queue_", "llmq_sim_"} {
		require.True(t, slices.ContainsFunc(slices.Collect(maps.Keys(got)), func(n string) bool { return strings.HasPrefix(n, prefix) }), prefix)
	}
}
