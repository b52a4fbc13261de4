package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/llmq/llmq/dlq"
)

var promql = parser.NewParser(parser.Options{})

// contractMetrics reads the metric names of docs/metrics.md.
func contractMetrics(t *testing.T) []string {
	t.Helper()
	return sectionMetrics(t, "")
}

// sectionMetrics reads the metric names of one section of docs/metrics.md
// (the "## Worker" section for "Worker"; "" for every section).
func sectionMetrics(t *testing.T, section string) []string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "docs", "metrics.md"))
	require.NoError(t, err)
	text := string(doc)
	if section != "" {
		start := strings.Index(text, "\n## "+section+"\n")
		require.GreaterOrEqual(t, start, 0, "no section %q", section)
		text = text[start+1:]
		if end := strings.Index(text[3:], "\n## "); end >= 0 {
			text = text[:end+3]
		}
	}
	var names []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(llmq_[a-z_]+)` \\|").FindAllStringSubmatch(text, -1) {
		names = append(names, m[1])
	}
	return names
}

// metricNames returns the metric names an expression selects.
func metricNames(t *testing.T, expr string) []string {
	t.Helper()
	node, err := promql.ParseExpr(expr)
	require.NoError(t, err, expr)
	var names []string
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			names = append(names, vs.Name)
		}
		return nil
	})
	return names
}

// requireInContract fails when a name is neither a contract metric (or a
// histogram series of one) nor Prometheus's own up.
func requireInContract(t *testing.T, contract []string, name, where string) {
	t.Helper()
	if name == "up" {
		return
	}
	base := name
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if trimmed, ok := strings.CutSuffix(name, suffix); ok && slices.Contains(contract, trimmed) {
			base = trimmed
		}
	}
	require.Contains(t, contract, base, "%s uses %s, which docs/metrics.md does not list", where, name)
}

func TestMetricsContract(t *testing.T) {
	t.Parallel()
	// The worker's families, which the rules and the dashboard use (the
	// whole contract is checked against the registries by
	// internal/app's TestMetricsDocMatchesTheRegistries).
	want := []string{
		"llmq_jobs_total", "llmq_upstream_requests_total", "llmq_tokens_total", "llmq_tenant_tokens_total", "llmq_retries_total",
		"llmq_fallbacks_total", "llmq_pool_switches_total", "llmq_shaping_wait_seconds", "llmq_first_call_stage_seconds", "llmq_in_flight", "llmq_concurrency_limit",
		"llmq_bucket_level", "llmq_quota_share", "llmq_upstream_incident", "llmq_upstream_incidents_total", "llmq_capacity_allocatable",
		"llmq_capacity_health",
		"llmq_scope_limit", "llmq_scope_level", "llmq_scope_in_flight", "llmq_scope_requests_total", "llmq_scope_tokens_total",
		"llmq_job_duration_seconds", "llmq_queue_depth", "llmq_dead_letters_total",
		"llmq_ingested_total", "llmq_ingest_handed_back_total", "llmq_ingest_dropped_total", "llmq_ingest_pauses_total", "llmq_claims_total", "llmq_released_total",
		"llmq_reaped_total", "llmq_lease_lost_total",
		"llmq_budget_spent_usd", "llmq_budget_reserved_usd", "llmq_budget_limit_usd", "llmq_budget_refused_total",
	}
	require.Equal(t, want, sectionMetrics(t, "Worker"))
	require.Subset(t, contractMetrics(t), append(want, "llmq_alerts_sent_total", "llmq_api_requests_total", "llmq_sim_requests_total"))

	// The alerter exports exactly the alert metrics of the contract.
	reg := prometheus.NewRegistry()
	_, err := dlq.NewAlerter(dlq.AlertConfig{WebhookURL: "http://127.0.0.1:1/", Registerer: reg})
	require.NoError(t, err)
	families, err := reg.Gather()
	require.NoError(t, err)
	var got []string
	for _, f := range families {
		got = append(got, f.GetName())
	}
	require.Equal(t, []string{"llmq_alerts_dropped_total", "llmq_alerts_failed_total", "llmq_alerts_sent_total"}, got)
}

func TestPrometheusRules(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.DiscardHandler)
	groups, errs := rulefmt.ParseFile(filepath.Join("prometheus", "llmq-rules.yml"), false, model.LegacyValidation, promql, logger)
	require.Empty(t, errs)
	require.Len(t, groups.Groups, 1)

	contract := contractMetrics(t)
	rules := map[string]rulefmt.Rule{}
	for _, r := range groups.Groups[0].Rules {
		require.NotEmpty(t, r.Alert, "only alerting rules: %q", r.Expr)
		rules[r.Alert] = r
		require.Contains(t, []string{"warning", "critical"}, r.Labels["severity"], r.Alert)
		require.NotEmpty(t, r.Annotations["summary"], r.Alert)
		require.NotEmpty(t, r.Annotations["description"], r.Alert)
		for _, name := range metricNames(t, r.Expr) {
			requireInContract(t, contract, name, r.Alert)
		}
	}
	names := make([]string, 0, len(rules))
	for n := range rules {
		names = append(names, n)
	}
	sort.Strings(names)
	require.Equal(t, []string{"LLMQDeadLettersGrowing", "LLMQNotificationsPilingUp", "LLMQQueueDepthHigh", "LLMQUpstreamIncident", "LLMQUpstreamKeyRefused",
		"LLMQUpstreamRateLimited", "LLMQWorkerAbsent", "LLMQWorkerDown"}, names)

	// The expressions are the alerts' definitions (compared as parsed
	// PromQL, so formatting does not matter).
	for alert, want := range map[string]string{
		"LLMQDeadLettersGrowing":  `increase(llmq_dead_letters_total[10m]) > 0`,
		"LLMQUpstreamRateLimited": `sum(rate(llmq_upstream_requests_total{code="429"}[5m])) / sum(rate(llmq_upstream_requests_total[5m])) > 0.05`,
		"LLMQQueueDepthHigh":      `max(llmq_queue_depth) > 10000`,
		"LLMQWorkerDown":          `up{job="llmq-worker"} == 0`,
		"LLMQWorkerAbsent":        `absent(up{job="llmq-worker"})`,
		"LLMQUpstreamIncident":    `max by (model) (llmq_upstream_incident) > 0`,
		"LLMQUpstreamKeyRefused":  `sum by (model, entry) (increase(llmq_upstream_incidents_total{cause="unauthorized"}[10m])) > 0`,
	} {
		wantExpr, err := promql.ParseExpr(want)
		require.NoError(t, err)
		gotExpr, err := promql.ParseExpr(rules[alert].Expr)
		require.NoError(t, err)
		require.Equal(t, wantExpr.String(), gotExpr.String(), alert)
	}
	require.Equal(t, "15m", rules["LLMQQueueDepthHigh"].For.String())
	require.Equal(t, "10m", rules["LLMQUpstreamRateLimited"].For.String())
}

// The same validation rejects broken rules, so a clean parse above means
// something.
func TestPrometheusRulesParserRejectsBrokenRules(t *testing.T) {
	t.Parallel()
	for name, rules := range map[string]string{
		"bad promql":       "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: rate(llmq_jobs_total[5m]\n",
		"bad duration":     "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up == 0\n    for: 5x\n",
		"unknown field":    "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up == 0\n    severity: page\n",
		"bad template":     "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up == 0\n    annotations:\n      summary: '{{ $labels.instance '\n",
		"record and alert": "groups:\n- name: g\n  rules:\n  - alert: A\n    record: b\n    expr: up\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "rules.yml")
			require.NoError(t, os.WriteFile(path, []byte(rules), 0o600))
			_, errs := rulefmt.ParseFile(path, false, model.LegacyValidation, promql, slog.New(slog.DiscardHandler))
			require.NotEmpty(t, errs)
		})
	}
}

func TestGrafanaDashboard(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("grafana", "llmq-dashboard.json"))
	require.NoError(t, err)
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID      int    `json:"id"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	require.NoError(t, dec.Decode(&dash))
	require.ErrorIs(t, dec.Decode(&struct{}{}), io.EOF)
	require.Equal(t, "llmq-overview", dash.UID)

	contract := contractMetrics(t)
	used := map[string]bool{}
	var titles []string
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		require.False(t, ids[p.ID], "duplicate panel id %d", p.ID)
		ids[p.ID] = true
		titles = append(titles, p.Title)
		require.NotEmpty(t, p.Targets, p.Title)
		for _, target := range p.Targets {
			// Grafana substitutes $__rate_interval before the query reaches
			// Prometheus.
			expr := strings.ReplaceAll(target.Expr, "$__rate_interval", "1m")
			for _, name := range metricNames(t, expr) {
				requireInContract(t, contract, name, p.Title)
				used[strings.TrimSuffix(name, "_bucket")] = true
			}
		}
	}
	for _, title := range []string{"Jobs by status", "Upstream requests by code", "Tokens per second", "Shaping wait", "Queue depth", "Dead letters by reason"} {
		require.Contains(t, titles, title)
	}
	// Every worker and alert metric is on the dashboard.
	for _, name := range append(sectionMetrics(t, "Worker"), sectionMetrics(t, "Dead-letter alerts (package `dlq`, in the worker)")...) {
		require.True(t, used[name], "no panel shows %s", name)
	}
}

func TestDockerCompose(t *testing.T) {
	t.Parallel()
	var compose struct {
		Services map[string]struct {
			Image   string   `yaml:"image"`
			Command []string `yaml:"command"`
		} `yaml:"services"`
	}
	decodeYAML(t, "docker-compose.yml", &compose)
	var names []string
	for name := range compose.Services {
		names = append(names, name)
	}
	sort.Strings(names)
	require.Equal(t, []string{"alertmanager", "api", "migrate", "postgres", "prometheus", "rabbitmq", "sim", "worker"}, names)
	for name, sub := range map[string]string{"migrate": "migrate", "sim": "sim", "worker": "worker", "api": "api"} {
		svc := compose.Services[name]
		require.Equal(t, "llmq:dev", svc.Image, name)
		require.Equal(t, sub, svc.Command[0], name)
	}

	var prom struct {
		RuleFiles []string `yaml:"rule_files"`
		Alerting  struct {
			Alertmanagers []struct {
				StaticConfigs []struct {
					Targets []string `yaml:"targets"`
				} `yaml:"static_configs"`
			} `yaml:"alertmanagers"`
		} `yaml:"alerting"`
		ScrapeConfigs []struct {
			JobName string `yaml:"job_name"`
		} `yaml:"scrape_configs"`
	}
	decodeYAML(t, filepath.Join("prometheus", "prometheus.yml"), &prom)
	require.Equal(t, []string{"/etc/prometheus/llmq-rules.yml"}, prom.RuleFiles)
	// Prometheus and llmq's dead-letter alerts (llmq.yaml) both send to the
	// compose file's Alertmanager.
	require.Equal(t, []string{"alertmanager:9093"}, prom.Alerting.Alertmanagers[0].StaticConfigs[0].Targets)
	var sample struct {
		Alerts struct {
			AlertmanagerURL string `yaml:"alertmanager_url"`
		} `yaml:"alerts"`
	}
	decodeYAML(t, "llmq.yaml", &sample)
	require.Equal(t, "http://alertmanager:9093", sample.Alerts.AlertmanagerURL)
	var am struct {
		Route struct {
			Receiver string `yaml:"receiver"`
		} `yaml:"route"`
		Receivers []struct {
			Name string `yaml:"name"`
		} `yaml:"receivers"`
	}
	decodeYAML(t, filepath.Join("alertmanager", "alertmanager.yml"), &am)
	require.Equal(t, "default", am.Route.Receiver)
	require.Equal(t, "default", am.Receivers[0].Name)
	var jobs []string
	for _, sc := range prom.ScrapeConfigs {
		jobs = append(jobs, sc.JobName)
	}
	require.Contains(t, jobs, "llmq-worker")
}

// probe is a Kubernetes HTTP probe.
type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
	} `yaml:"httpGet"`
}

func TestKubernetesManifests(t *testing.T) {
	t.Parallel()
	type object struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   struct {
			Name   string            `yaml:"name"`
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Data       map[string]string `yaml:"data"`
		StringData map[string]string `yaml:"stringData"`
		Resources  []string          `yaml:"resources"`
		Spec       struct {
			Selector struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
			Endpoints []struct {
				Port string `yaml:"port"`
			} `yaml:"endpoints"`
			Template struct {
				Spec struct {
					Containers []struct {
						LivenessProbe  probe `yaml:"livenessProbe"`
						ReadinessProbe probe `yaml:"readinessProbe"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	objects := map[string]object{}
	var refs []string // secret keys the Deployments reference
	for _, file := range []string{"configmap.yaml", "worker.yaml", "api.yaml", "secret.example.yaml", "kustomization.yaml", "servicemonitor.yaml",
		"networkpolicy.yaml"} {
		raw, err := os.ReadFile(filepath.Join("kubernetes", file))
		require.NoError(t, err)
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		for {
			var node yaml.Node
			err := dec.Decode(&node)
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, file)
			var obj object
			require.NoError(t, node.Decode(&obj), file)
			require.NotEmpty(t, obj.APIVersion, file)
			objects[obj.Kind+"/"+obj.Metadata.Name] = obj
			refs = append(refs, secretKeyRefs(&node)...)
		}
	}
	for _, want := range []string{
		"ConfigMap/llmq-config", "Secret/llmq-secrets", "Deployment/llmq-worker", "Service/llmq-worker",
		"Deployment/llmq-api", "Service/llmq-api", "Service/llmq-api-metrics", "Kustomization/",
		"ServiceMonitor/llmq-worker", "ServiceMonitor/llmq-api", "NetworkPolicy/llmq-metrics", "NetworkPolicy/llmq-api",
	} {
		require.Contains(t, objects, want)
	}
	// The ServiceMonitor the worker's Service comment names is shipped,
	// and selects that Service's labels and port.
	require.Equal(t, objects["Service/llmq-worker"].Metadata.Labels, objects["ServiceMonitor/llmq-worker"].Spec.Selector.MatchLabels)
	require.Equal(t, "metrics", objects["ServiceMonitor/llmq-worker"].Spec.Endpoints[0].Port)
	// The example Secret's database URL is the one its comment shows.
	require.Contains(t, objects["Secret/llmq-secrets"].StringData["database-url"], "sslmode=require")
	// Both Deployments probe HTTP endpoints that exist: /healthz (and the
	// API's /readyz).
	for name, paths := range map[string][]string{"Deployment/llmq-worker": {"/healthz", "/healthz"}, "Deployment/llmq-api": {"/healthz", "/readyz"}} {
		c := objects[name].Spec.Template.Spec.Containers[0]
		require.Equal(t, paths, []string{c.LivenessProbe.HTTPGet.Path, c.ReadinessProbe.HTTPGet.Path}, name)
	}
	require.Equal(t, []string{"configmap.yaml", "worker.yaml", "api.yaml", "networkpolicy.yaml"}, objects["Kustomization/"].Resources)

	// Every referenced key exists in the example Secret.
	require.NotEmpty(t, refs)
	for _, key := range refs {
		require.Contains(t, objects["Secret/llmq-secrets"].StringData, key)
	}

	// The ConfigMap ships the sample llmq.yaml unchanged, and it is YAML.
	sample, err := os.ReadFile("llmq.yaml")
	require.NoError(t, err)
	require.Equal(t, string(sample), objects["ConfigMap/llmq-config"].Data["llmq.yaml"])
	var cfg map[string]any
	require.NoError(t, yaml.Unmarshal(sample, &cfg))
	require.Contains(t, cfg, "models")
	require.Contains(t, cfg, "alerts")
}

// secretKeyRefs collects the key of every secretKeyRef under node.
func secretKeyRefs(node *yaml.Node) []string {
	var keys []string
	for i := 0; i+1 < len(node.Content); i++ {
		if node.Kind == yaml.MappingNode && i%2 == 0 && node.Content[i].Value == "secretKeyRef" {
			var ref struct {
				Key string `yaml:"key"`
			}
			if node.Content[i+1].Decode(&ref) == nil {
				keys = append(keys, ref.Key)
			}
		}
	}
	for _, child := range node.Content {
		keys = append(keys, secretKeyRefs(child)...)
	}
	return keys
}

func decodeYAML(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, v), path)
}
