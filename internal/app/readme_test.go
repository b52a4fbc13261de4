package app_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/batchapi"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/internal/retention"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/worker"
)

// TestREADMEDefaultsAreTheComponents holds the README's configuration
// tables to the defaults the components export, so the two cannot drift:
// the configuration layer keeps none of its own.
func TestREADMEDefaultsAreTheComponents(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	// "| key | default | meaning |" rows of the configuration tables.
	rows := map[string]string{}
	for line := range strings.Lines(string(data)) {
		cells := strings.Split(strings.TrimSpace(line), " | ")
		if len(cells) == 3 && strings.HasPrefix(cells[0], "| `") {
			rows[strings.TrimPrefix(cells[0], "| ")] = cells[1]
		}
	}
	list := func(vs ...any) string {
		out := make([]string, len(vs))
		for i, v := range vs {
			if d, ok := v.(time.Duration); ok {
				v = duration(d)
			}
			out[i] = fmt.Sprint(v)
		}
		return strings.Join(out, ", ")
	}
	code := func(s string) string { return "`" + s + "`" }
	for key, want := range map[string]string{
		"`LLMQ_DATABASE_URL` / `--database-url`":  code(config.DatabaseURLDefault),
		"`LLMQ_BROKER` / `--broker`":              code(config.BrokerDefault),
		"`OPENAI_BASE_URL` / `--openai-base-url`": code(config.OpenAIBaseURLDefault),
		"`OPENAI_API_KEY` / `--openai-api-key`":   code(config.OpenAIAPIKeyDefault),
		"`models.<name>.batch_discount`":          list(llmq.BatchDiscountDefault),
		"`retry.max_attempts`":                    list(worker.MaxAttemptsDefault),
		"`retry.base_delay`, `retry.max_delay`":   list(worker.BackoffBaseDefault, worker.BackoffMaxDefault),
		"`retry.budget`":                          list(worker.RetryBudgetRatioDefault),
		"`retry.fallback_after`":                  list(worker.FallbackAfterDefault),
		"`retry.fallback_max_wait`":               list(worker.FallbackMaxWaitDefault),
		"`retry.incident_min_calls`, `.incident_failure_ratio`, `.incident_window`, `.incident_probe_every`": list(
			worker.IncidentMinCallsDefault, worker.IncidentFailureRatioDefault, worker.IncidentWindowDefault, worker.IncidentProbeEveryDefault),
		"`retry.outage_limit`":                     list(worker.OutageLimitDefault),
		"`batch.window`":                           code(batchapi.WindowDefault),
		"`batch.timezone`":                         code(batchapi.TimezoneDefault),
		"`batch.drain_threshold`":                  list(batchapi.DrainThresholdDefault),
		"`batch.flush_interval`":                   list(batchapi.FlushIntervalDefault),
		"`batch.max_lines`":                        list(batchapi.MaxLinesDefault),
		"`backpressure.soft_depth`, `.hard_depth`": list(producer.SoftDepthDefault, producer.HardDepthDefault),
		"`alerts.severity`, `.group_wait`, `.group_interval`, `.resolve_timeout`, `.max_per_minute`": list(
			dlq.AlertSeverityDefault, dlq.AlertGroupWaitDefault, dlq.AlertGroupIntervalDefault,
			dlq.AlertResolveTimeoutDefault, dlq.AlertMaxPerMinuteDefault),
		"`max_message_bytes`":                                list(llmq.MaxMessageBytesDefault),
		"`tenants.<name>.overage`":                           code(string(llmq.OverageQueue)),
		"`tenants.<name>.output_cap`":                        list(llmq.OutputCapDefault),
		"`gateway.timeout`":                                  list(api.GatewayTimeoutDefault),
		"`gateway.priority`":                                 list(llmq.PriorityNormal),
		"`gateway.max_deadline`":                             list(api.GatewayMaxDeadlineDefault),
		"`gateway.max_waiting`":                              list(api.GatewayMaxWaitingDefault),
		"`rate_limits.key_rpm`":                              list(api.KeyRPMDefault),
		"`rate_limits.tenant_rpm`":                           list(api.TenantRPMDefault),
		"`rate_limits.auth_failures_per_minute`":             list(api.AuthFailuresPerMinuteDefault),
		"`rate_limits.trusted_proxy_header`, `.max_clients`": "none, " + list(api.RateLimitClientsDefault),
		"`retention.succeeded`":                              list(retention.SucceededDefault),
		"`retention.unsuccessful`":                           list(retention.UnsuccessfulDefault),
		"`retention.dead_letters`, `.batches`":               list(retention.DeadLettersDefault, retention.BatchesDefault),
		"`retention.tombstones`":                             list(retention.TombstonesDefault),
		"`retention.interval`":                               list(retention.IntervalDefault),
		"`ingest.size_order`":                                list(worker.SizeOrderDefault),
		"`ingest.tenant_cap`":                                list(worker.TenantCapDefault),
		"`capacity.safety`, `.reserved`, `.tail_latency`": list(
			worker.CapacitySafetyDefault, worker.CapacityReservedDefault, worker.CapacityTailLatencyDefault),
	} {
		got, ok := rows[key]
		require.True(t, ok, "README has no row %s", key)
		require.Equal(t, want, got, "README default of %s", key)
	}
}

// duration writes d as the README does: 30m, not 30m0s.
func duration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// TestREADMEMakeTargetsAreDocumented: every `make <target>` the README
// names is a target of the Makefile that `make help` lists (a "## target:"
// line).
func TestREADMEMakeTargetsAreDocumented(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	makefile, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	require.NoError(t, err)
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^## ([a-z-]+): `).FindAllStringSubmatch(string(makefile), -1) {
		listed[m[1]] = true
	}
	require.True(t, listed["help"])
	named := regexp.MustCompile("`make ([a-z-]+)").FindAllStringSubmatch(string(readme), -1)
	require.NotEmpty(t, named)
	for _, m := range named {
		require.True(t, listed[m[1]], "README names make %s, which make help does not list", m[1])
	}
}
