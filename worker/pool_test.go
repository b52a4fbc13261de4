package worker_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
	"github.com/llmq/llmq/worker"
)

// TestKeyPoolMovesToTheSecondKey checks key pools against two simulators,
// real Postgres and RabbitMQ: a job refused on key a moves to key b, and the
// others go there rather than to the fallback model "backup", but only when
// key b serves the request, has headroom and fits the job's budget at its
// prices (docs/design/tenants.md#testkeypoolmovestothesecondkey).
func TestKeyPoolMovesToTheSecondKey(t *testing.T) {
	t.Parallel()
	const jobs = 4
	tests := []struct {
		name string
		// entryB is key b's entry (its Name and Upstream are set here).
		entryB worker.PoolEntry
		// slowB makes simulator B answer after 3 s.
		slowB bool
		// budget gives the jobs' project a daily budget of 1 USD with
		// 0.5 spent.
		budget bool
		// b and backup are the calls key b and the fallback model accept;
		// entries counts the jobs' recorded calls by entry (key a's is
		// the one 429).
		b, backup int64
		entries   map[string]int
	}{
		{name: "key b has capability, quota and budget: the jobs move to it",
			entryB: worker.PoolEntry{}, b: jobs, backup: 0,
			entries: map[string]int{"a": 1, "b": jobs}},
		{name: "capability: key b's context window cannot hold the request",
			entryB: worker.PoolEntry{ContextWindow: 16}, b: 0, backup: jobs,
			entries: map[string]int{"a": 1, "": jobs}},
		{name: "quota: key b's one slot is taken by a slow call",
			entryB: worker.PoolEntry{Concurrency: 1}, slowB: true, b: 1, backup: jobs - 1,
			entries: map[string]int{"a": 1, "b": 1, "": jobs - 1}},
		{name: "budget: a call at key b's prices would pass the budget",
			entryB: worker.PoolEntry{OutputPricePer1M: 100_000}, budget: true, b: 0, backup: jobs,
			entries: map[string]int{"a": 1, "": jobs}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t, upstreamsim.Config{Seed: 140 + uint64(i),
				Models: map[string]upstreamsim.ModelConfig{"primary": {Limits: upstreamsim.Limits{RPM: 1, TPM: -1}}}})
			simB := upstreamsim.Config{Seed: 150 + uint64(i),
				Models: map[string]upstreamsim.ModelConfig{"primary": {Limits: upstreamsim.Limits{RPM: -1, TPM: -1}}}}
			if tt.slowB {
				simB.Latency.TTFT = 3 * time.Second
			}
			b := upstreamsim.NewTestServer(t, simB)
			tenants := llmq.Tenants{"acme": {Projects: map[string]llmq.Scope{"p": {}}}}
			if tt.budget {
				tenants = llmq.Tenants{"acme": {Projects: map[string]llmq.Scope{"p": {DailyCost: 1}}}}
				st, err := store.Open(context.Background(), storetest.NewDB(t), store.WithOrder(store.Order{Tenants: tenants}))
				require.NoError(t, err)
				t.Cleanup(st.Close)
				tb.store, tb.letters.store = st, st
				tb.seedSpend(t, "p", 1, 0.5)
			}
			// Another client spends key a's minute.
			other := upstreamAt(tb.sim.URL, 10*time.Second).Call(context.Background(), "primary",
				[]byte(`{"model":"primary","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`))
			require.Equal(t, worker.ClassSuccess, other.Outcome.Class)
			entryB := tt.entryB
			entryB.Name, entryB.Upstream = "b", upstreamAt(b.URL, 10*time.Second)
			reg := prometheus.NewRegistry()
			tb.start(t, func(c *worker.Config) {
				c.Registerer = reg
				c.Tenants = tenants
				if tt.budget {
					c.Budgets = tb.store.Budgets()
				}
				// A call of "primary" costs 0.032 USD at the model's
				// prices (32 output tokens); "backup" is free.
				c.Catalog = llmq.Catalog{Models: map[string]llmq.Model{"primary": {OutputPricePer1M: 1000}, "backup": {}}}
				c.Pools = map[string][]worker.PoolEntry{"primary": {
					{Name: "a", Upstream: upstreamAt(tb.sim.URL, 10*time.Second), RPM: 1},
					entryB,
				}}
				c.Strategy, c.FallbackMaxWait = "", time.Second // shape: the quotas are known
				// Key a's lane pauses for the 429's Retry-After.
				c.Backoff.MaxRetryAfter = time.Minute
			})
			ids := make([]string, jobs)
			for j := range ids {
				ids[j] = fmt.Sprintf("job-%d", j)
				tb.publish(t, []byte(fmt.Sprintf(`{"id":%q,"tenant":"acme","project":"p","fallback_models":["backup"],
					"body":{"model":"primary","max_tokens":32,"messages":[{"role":"user","content":"Say hello number %d"}]}}`, ids[j], j)))
			}
			entries := map[string]int{}
			for _, id := range ids {
				rec := tb.waitTenantTerminal(t, "acme", id, 30*time.Second)
				require.Equal(t, llmq.StatusSucceeded, rec.Status, id)
				calls, err := tb.store.Jobs().Attempts(context.Background(), "acme", id)
				require.NoError(t, err)
				for _, c := range calls[:len(calls)-1] {
					require.Equal(t, "a", c.Entry, "%s: only key a refused a call", id)
					require.Equal(t, "rate_limited", c.Outcome, id)
				}
				for _, c := range calls {
					entries[c.Entry]++
				}
			}
			require.Equal(t, tt.entries, entries, "the calls recorded by entry")
			statsA, statsB := tb.sim.Sim.Stats().Models, b.Sim.Stats().Models
			require.EqualValues(t, 1, statsA["primary"].Accepted, "key a: the other client's call")
			require.EqualValues(t, 1, statsA["primary"].RateLimited["requests"], "key a: one 429, then its lane paused")
			require.Equal(t, tt.b, statsB["primary"].Accepted, "key b")
			require.Equal(t, tt.backup, statsA["backup"].Accepted, "the fallback model")
			text := metricsText(t, reg)
			require.Contains(t, text, `llmq_upstream_requests_total{code="429",entry="a",model="primary"} 1`+"\n")
			if tt.b > 0 {
				require.Contains(t, text, fmt.Sprintf(`llmq_upstream_requests_total{code="200",entry="b",model="primary"} %d`+"\n", tt.b))
			}
		})
	}
}

// waitTenantTerminal polls Postgres until tenant's job id is terminal.
func (tb *testBundle) waitTenantTerminal(t *testing.T, tenant, id string, timeout time.Duration) *store.JobRecord {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		rec, err := tb.store.Jobs().Get(context.Background(), tenant, id)
		if err == nil && rec.Status.Terminal() {
			return rec
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not terminal after %v", id, timeout)
		}
		time.Sleep(20 * time.Millisecond) // polling an external system; not a correctness wait
	}
}

// TestKeyPoolLedgerKeys: replicas share each key of a pool apart: every
// replica writes one quota ledger row per entry, keyed by the entry's base
// URL, key hash and the model, and none for the single upstream's key.
func TestKeyPoolLedgerKeys(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 160})
	scopeA, scopeB := worker.QuotaScopeOf(tb.sim.URL, "sk-a"), worker.QuotaScopeOf(tb.sim.URL, "sk-b")
	for range 2 {
		tb.start(t, func(c *worker.Config) {
			c.Catalog = llmq.Catalog{Models: map[string]llmq.Model{"m": {}}}
			c.Ledger, c.QuotaScope = tb.store.Ledger(), worker.QuotaScopeOf(tb.sim.URL, "sk-test")
			c.LedgerPeriod, c.LedgerLease = 100*time.Millisecond, time.Second
			c.Pools = map[string][]worker.PoolEntry{"m": {
				{Name: "a", Upstream: upstreamAt(tb.sim.URL, time.Second), QuotaScope: scopeA, RPM: 60},
				{Name: "b", Upstream: upstreamAt(tb.sim.URL, time.Second), QuotaScope: scopeB, RPM: 60},
			}}
		})
	}
	want := map[string]int{scopeA + " m": 2, scopeB + " m": 2}
	var got map[string]int
	require.Eventually(t, func() bool {
		rows, err := tb.store.Pool().Query(context.Background(), `SELECT quota_key, count(*) FROM quota_ledger GROUP BY quota_key`)
		require.NoError(t, err)
		got = map[string]int{}
		for rows.Next() {
			var key string
			var n int
			require.NoError(t, rows.Scan(&key, &n))
			got[key] = n
		}
		return rows.Err() == nil && maps.Equal(got, want)
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, want, got, "ledger rows by key")
}

// TestKeyPoolNeverMovesToAModelTheJobDidNotAllow: key a exhausted (spent by
// another client), key b unable to serve the request (its context window),
// and jobs that allow no fallback model, in a catalog that lists another
// model: every job waits on key a (one 429, then its lane holds them), and
// no other key or model is called.
func TestKeyPoolNeverMovesToAModelTheJobDidNotAllow(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 170,
		Models: map[string]upstreamsim.ModelConfig{"primary": {Limits: upstreamsim.Limits{RPM: 1, TPM: -1}}}})
	b := upstreamsim.NewTestServer(t, upstreamsim.Config{Seed: 171})
	other := upstreamAt(tb.sim.URL, 10*time.Second).Call(context.Background(), "primary",
		[]byte(`{"model":"primary","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`))
	require.Equal(t, worker.ClassSuccess, other.Outcome.Class)
	tb.start(t, func(c *worker.Config) {
		c.Catalog = llmq.Catalog{Models: map[string]llmq.Model{"primary": {}, "backup": {}}}
		c.Pools = map[string][]worker.PoolEntry{"primary": {
			{Name: "a", Upstream: upstreamAt(tb.sim.URL, 10*time.Second), RPM: 1},
			{Name: "b", Upstream: upstreamAt(b.URL, 10*time.Second), ContextWindow: 16},
		}}
		c.Strategy, c.FallbackMaxWait = "", time.Second
		c.Backoff.MaxRetryAfter = time.Minute
	})
	const jobs = 4
	for j := range jobs {
		tb.publish(t, jobJSON(fmt.Sprintf("job-%d", j), "primary", ""))
	}
	// Every job is held: waiting in key a's lane, or backing off after
	// its 429 (which may come after the jobs are first seen waiting).
	require.Eventually(t, func() bool {
		return tb.sim.Sim.Stats().Models["primary"].RateLimited["requests"] >= 1 &&
			tb.count(t, `status IN ('running', 'retrying') AND phase IN ('`+store.PhaseWaitingForQuota+`', '`+store.PhaseBackingOff+`')`) == jobs
	}, 20*time.Second, 20*time.Millisecond)
	statsA, statsB := tb.sim.Sim.Stats().Models, b.Sim.Stats().Models
	require.EqualValues(t, 1, statsA["primary"].Accepted, "key a: the other client's call")
	require.EqualValues(t, 1, statsA["primary"].RateLimited["requests"], "key a: one 429, then its lane paused")
	require.Zero(t, statsA["backup"].Accepted, "a model the jobs did not allow")
	require.Zero(t, statsB["primary"].Accepted, "key b cannot serve the request")
	require.Zero(t, tb.count(t, `status IN ('succeeded', 'failed', 'dead_lettered')`))
}
