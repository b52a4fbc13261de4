package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
	"github.com/llmq/llmq/worker"
)

// The quota of the fair-share tests: TPM binds (a job is about 50 tokens:
// 480 a minute by TPM against 6,000 by RPM).
const (
	fairModel = "m"
	fairRPM   = 6_000
	fairTPM   = 24_000
)

// setupFair is a worker on the fair-share quota whose store knows tenants;
// it returns the worker's metrics registry too.
func setupFair(t *testing.T, tenants llmq.Tenants) (*testBundle, *prometheus.Registry) {
	t.Helper()
	tb := setup(t, upstreamsim.Config{
		Seed:   14,
		Models: map[string]upstreamsim.ModelConfig{fairModel: {Limits: upstreamsim.Limits{RPM: fairRPM, TPM: fairTPM}}},
		Output: upstreamsim.OutputConfig{Distribution: upstreamsim.DistFixed, Min: 1, Max: 1 << 20, Mean: 1 << 20},
	})
	st, err := store.Open(context.Background(), storetest.NewDB(t), store.WithOrder(store.Order{Tenants: tenants}))
	require.NoError(t, err)
	t.Cleanup(st.Close)
	tb.store, tb.letters.store = st, st
	reg := prometheus.NewRegistry()
	tb.start(t, func(c *worker.Config) {
		c.Registerer, c.Tenants = reg, tenants
		c.Strategy = shaping.StrategyShape
		c.Catalog = llmq.Catalog{Models: map[string]llmq.Model{fairModel: {RPM: fairRPM, TPM: fairTPM}}}
		c.IngestWindow = 6000
	})
	return tb, reg
}

// tenantTokens reads llmq_tenant_tokens_total{tenant} from reg.
func tenantTokens(t *testing.T, reg *prometheus.Registry, tenant string) int {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "llmq_tenant_tokens_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == tenant {
				return int(m.GetCounter().GetValue())
			}
		}
	}
	return 0
}

// fairJob is a job of tenant with maxTokens of output and a fixed prompt.
func fairJob(tenant string, i, maxTokens int) []byte {
	return []byte(fmt.Sprintf(`{"id":"%s-%04d","tenant":%q,"body":{"model":%q,"max_tokens":%d,"messages":[{"role":"user","content":"Answer the question."}]}}`,
		tenant, i, tenant, fairModel, maxTokens))
}

// tokens sums the tokens served to the succeeded jobs of tenant.
func (tb *testBundle) tokens(t *testing.T, tenant string) int {
	t.Helper()
	var n int
	require.NoError(t, tb.store.Pool().QueryRow(context.Background(), `SELECT coalesce(sum(prompt_tokens + completion_tokens), 0)
		FROM jobs WHERE tenant = $1 AND status = 'succeeded'`, tenant).Scan(&n))
	return n
}

// TestFairShareOfABindingQuota: tenants a (weight 3) and b (weight 1) both
// backlogged against one binding provider quota get its tokens 3:1 within
// 5%; b alone gets the whole quota.
func TestFairShareOfABindingQuota(t *testing.T) {
	if testing.Short() {
		t.Skip("about 60 s of a binding quota")
	}
	t.Parallel()
	tb, reg := setupFair(t, llmq.Tenants{"a": {Scope: llmq.Scope{Weight: 3}}, "b": {Scope: llmq.Scope{Weight: 1}}})

	// b alone: 600 jobs of ~51 tokens, 30,600 tokens: the provider's
	// minute bucket (24,000, full at the start) at once, then 6,600 tokens
	// of refill, 17 s at the whole quota (66 s at a quarter of it). It
	// leaves the bucket empty: the next phase binds from its first claim.
	start := time.Now()
	for i := range 600 {
		tb.publish(t, fairJob("b", i, 40))
	}
	require.Eventually(t, func() bool { return tb.count(t, `tenant = 'b' AND status = 'succeeded'`) == 600 },
		90*time.Second, 20*time.Millisecond)
	alone := time.Since(start)
	t.Logf("b alone: 600 jobs in %v, %d 429s", alone, tb.rateLimited())
	require.Less(t, alone, 40*time.Second, "b alone runs at the whole quota")
	bBefore := tb.tokens(t, "b")
	// The metric names the configured tenants, every other one "other".
	require.Equal(t, bBefore, tenantTokens(t, reg, "b"))
	require.Zero(t, tenantTokens(t, reg, worker.TenantOther))

	// Both backlogged (published interleaved, so that neither is ingested
	// first): 3:1 over the next 240 jobs (half a minute).
	for i := range 400 {
		tb.publish(t, fairJob("a", i, 40), fairJob("b", 1000+i, 40))
	}
	require.Eventually(t, func() bool {
		return tb.count(t, `tenant IN ('a', 'b') AND status = 'succeeded'`) >= 600+240
	}, 60*time.Second, 20*time.Millisecond)
	a, b := tb.tokens(t, "a"), tb.tokens(t, "b")-bBefore
	ratio := float64(a) / float64(b)
	t.Logf("both: a %d tokens, b %d tokens, ratio %.3f", a, b, ratio)
	require.InDelta(t, 3.0, ratio, 3.0*0.05, "tokens served a:b")
}

// TestFairShareAfterAFlood: a tenant floods 5,000 jobs; another tenant's
// 50 jobs, published after all of them, finish within the time their
// weight share allows (half the quota: 50 jobs of ~55 tokens in about 14
// s), not behind the flood (11 minutes of quota). The ingest window
// (6,000) holds both in Postgres.
func TestFairShareAfterAFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("5,000 jobs and about 30 s of a binding quota")
	}
	t.Parallel()
	tb, reg := setupFair(t, nil)
	flood := make([][]byte, 5000)
	for i := range flood {
		flood[i] = fairJob("flood", i, 40)
	}
	tb.publish(t, flood...)
	// The flood spends the provider's minute bucket (24,000 tokens, ~470
	// jobs): from then on the quota binds.
	require.Eventually(t, func() bool { return tb.count(t, `tenant = 'flood' AND status = 'succeeded'`) >= 500 },
		60*time.Second, 20*time.Millisecond)
	late := make([][]byte, 50)
	for i := range late {
		late[i] = fairJob("late", i, 40)
	}
	tb.publish(t, late...)
	require.Eventually(t, func() bool { return tb.count(t, `tenant = 'late' AND status = 'succeeded'`) == 50 },
		90*time.Second, 50*time.Millisecond)
	var took time.Duration
	require.NoError(t, tb.store.Pool().QueryRow(context.Background(), `SELECT max(finished_at) - min(created_at)
		FROM jobs WHERE tenant = 'late'`).Scan(&took))
	queued := tb.count(t, `tenant = 'flood' AND status = 'queued'`)
	t.Logf("late: 50 jobs in %v after they were recorded; flood: %d still queued", took, queued)
	require.Less(t, took, 25*time.Second, "the late tenant's half of the quota")
	require.Greater(t, queued, 4000, "the flood is still backlogged")
	// No tenant is configured: every token is "other" (settled before the
	// result is stored, so at least those of the stored results).
	require.Zero(t, tenantTokens(t, reg, "flood")+tenantTokens(t, reg, "late"))
	require.GreaterOrEqual(t, tenantTokens(t, reg, worker.TenantOther), tb.tokens(t, "flood")+tb.tokens(t, "late"))
}
