package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
	"github.com/llmq/llmq/worker"
)

// The budget tests' model: prompts are free and output costs 0.001 USD a
// token, so a call's price is exactly its completion tokens, which the
// simulator makes equal to the call's max_tokens.
const (
	budgetModel    = "m"
	outputPerToken = 0.001
)

// budgetSetup is a bundle whose store knows tenants, with a simulator
// whose completions fill max_tokens.
func budgetSetup(t *testing.T, tenants llmq.Tenants, faults upstreamsim.FaultConfig) *testBundle {
	t.Helper()
	tb := setup(t, upstreamsim.Config{Seed: 11, Faults: faults,
		Output: upstreamsim.OutputConfig{Distribution: upstreamsim.DistFixed, Min: 1, Max: 1 << 20, Mean: 1 << 20}})
	st, err := store.Open(context.Background(), storetest.NewDB(t), store.WithOrder(store.Order{Tenants: tenants}))
	require.NoError(t, err)
	t.Cleanup(st.Close)
	tb.store, tb.letters.store = st, st
	return tb
}

// budgetWorker starts a worker that enforces tenants' budgets.
func (tb *testBundle) budgetWorker(t *testing.T, tenants llmq.Tenants, alerts worker.BudgetAlerter, mutate func(*worker.Config)) {
	t.Helper()
	tb.start(t, func(c *worker.Config) {
		c.Tenants, c.Budgets, c.BudgetAlerts = tenants, tb.store.Budgets(), alerts
		c.Catalog = llmq.Catalog{Models: map[string]llmq.Model{budgetModel: {OutputPricePer1M: outputPerToken * 1e6}}}
		if mutate != nil {
			mutate(c)
		}
	})
}

// seedSpend records spent USD on acme/project's budget of today, as the
// batch lane's charges do (without alerting).
func (tb *testBundle) seedSpend(t *testing.T, project string, limit, spent float64) {
	t.Helper()
	now := time.Now()
	_, err := tb.store.Pool().Exec(context.Background(), `INSERT INTO budgets (tenant, project, period, period_start,
		period_end, limit_usd, spent_usd) VALUES ('acme', $1, 'day', $2, $3, $4, $5)`,
		project, llmq.PeriodDay.Start(now), llmq.PeriodDay.End(now), limit, spent)
	require.NoError(t, err)
}

// budgetOf is acme/project's budget of today.
func (tb *testBundle) budgetOf(t *testing.T, project string) store.BudgetUsage {
	t.Helper()
	us, err := tb.store.Budgets().BudgetUsages(context.Background(), "acme")
	require.NoError(t, err)
	for _, u := range us {
		if u.Project == project && u.Period == llmq.PeriodDay {
			return u
		}
	}
	t.Fatalf("no daily budget of acme/%s", project)
	return store.BudgetUsage{}
}

func budgetJob(project string, i int, priority llmq.Priority) []byte {
	return []byte(fmt.Sprintf(`{"id":"%s-%03d","tenant":"acme","project":%q,"priority":%q,"body":{"model":%q,"max_tokens":100,
		"messages":[{"role":"user","content":"Summarise the report."}]}}`, project, i, project, priority, budgetModel))
}

// hook is a webhook alert sink that counts the budget alerts by threshold.
type hook struct {
	mu  sync.Mutex
	got map[string]int
}

var thresholdRE = regexp.MustCompile(`threshold=(\d+)`)

func newHook(t *testing.T) (*hook, *dlq.Alerter) {
	t.Helper()
	h := &hook{got: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var msg struct {
			Blocks []struct {
				Elements []struct{ Text string } `json:"elements"`
			} `json:"blocks"`
		}
		body, _ := io.ReadAll(r.Body)
		if json.Unmarshal(body, &msg) == nil && len(msg.Blocks) == 3 && len(msg.Blocks[2].Elements) == 1 {
			if m := thresholdRE.FindStringSubmatch(msg.Blocks[2].Elements[0].Text); m != nil {
				h.mu.Lock()
				h.got[m[1]]++
				h.mu.Unlock()
			}
		}
	}))
	t.Cleanup(srv.Close)
	a, err := dlq.NewAlerter(dlq.AlertConfig{WebhookURL: srv.URL + "/hook", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, a.Start(context.Background()))
	t.Cleanup(func() { _ = a.Stop(context.Background()) })
	return h, a
}

func (h *hook) counts() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for k, v := range h.got {
		out[k] = v
	}
	return out
}

// TestBudgetBurstAtTheEdge (docs/design/tenants.md#budgets): a project at 95% of
// its daily budget of 1 USD receives 200 concurrent jobs, served by two
// workers. Past 90% each call's output is capped at 20 tokens (0.02 USD),
// so exactly two calls fit: the spend stops at 0.99 USD, 0.01 short of the
// budget, less than one reservation, and never above it; the other 198
// jobs wait (waiting_reason budget). The 70%, 90% and 100% alerts reach
// the webhook once each.
func TestBudgetBurstAtTheEdge(t *testing.T) {
	t.Parallel()
	tenants := llmq.Tenants{"acme": {Projects: map[string]llmq.Scope{"bulk": {DailyCost: 1, OutputCap: 20}}}}
	tb := budgetSetup(t, tenants, upstreamsim.FaultConfig{})
	h, alerter := newHook(t)
	tb.seedSpend(t, "bulk", 1, 0.95)
	for range 2 {
		tb.budgetWorker(t, tenants, alerter, func(c *worker.Config) { c.MaxInFlight = 128 })
	}
	jobs := make([][]byte, 200)
	for i := range jobs {
		jobs[i] = budgetJob("bulk", i, llmq.PriorityNormal)
	}
	tb.publish(t, jobs...)

	// Settled: the calls the budget allows made (right after the publish
	// every job is queued and none running, before any call), none
	// running.
	require.Eventually(t, func() bool {
		succeeded := tb.count(t, `status = 'succeeded'`)
		return succeeded >= 2 && tb.count(t, `status = 'queued'`)+succeeded == 200 && tb.count(t, `status = 'running'`) == 0
	}, 60*time.Second, 20*time.Millisecond)
	u := tb.budgetOf(t, "bulk")
	require.InDelta(t, 0.99, u.SpentUSD, 1e-9, "two calls of 0.02 USD")
	require.InDelta(t, 0, u.ReservedUSD, 1e-9)
	require.LessOrEqual(t, u.SpentUSD, 1.0+1e-9, "never above the budget")
	require.Equal(t, 2, tb.count(t, `status = 'succeeded' AND completion_tokens = 20`), "capped at 20 tokens")
	require.Equal(t, 198, tb.count(t, `status = 'queued'`))
	var costs float64
	require.NoError(t, tb.store.Pool().QueryRow(context.Background(), `SELECT sum(cost_usd) FROM jobs WHERE status = 'succeeded'`).Scan(&costs))
	require.InDelta(t, 0.04, costs, 1e-9, "the budget's spend is the jobs' cost")
	var queued string
	require.NoError(t, tb.store.Pool().QueryRow(context.Background(), `SELECT id FROM jobs WHERE status = 'queued' LIMIT 1`).Scan(&queued))
	rec, err := tb.store.Jobs().Get(context.Background(), "acme", queued)
	require.NoError(t, err)
	require.Equal(t, store.WaitingReasonBudget, rec.WaitingReason)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, alerter.Stop(ctx), "every alert delivered")
	require.Equal(t, map[string]int{"70": 1, "90": 1, "100": 1}, h.counts())
}

// TestBudgetFailedCallsCostNothing: calls that fail give their reservation
// back at once (the reaper's sweep, an hour away here, is not what frees
// it); low-priority jobs wait past 90%; a project whose policy is reject
// dead-letters its jobs (budget_exceeded) once its budget is spent.
func TestBudgetFailedCallsCostNothing(t *testing.T) {
	t.Parallel()
	tenants := llmq.Tenants{"acme": {Projects: map[string]llmq.Scope{
		"broken": {DailyCost: 1}, "low": {DailyCost: 1}, "strict": {DailyCost: 1, Overage: llmq.OverageReject}}}}
	tb := budgetSetup(t, tenants, upstreamsim.FaultConfig{
		Rates: map[upstreamsim.FaultKind]float64{upstreamsim.FaultServerError: 1}, Models: []string{"broken-model"}})
	tb.seedSpend(t, "low", 1, 0.9)
	tb.seedSpend(t, "strict", 1, 0.99)
	tb.budgetWorker(t, tenants, nil, func(c *worker.Config) {
		c.ReapInterval, c.MaxAttempts = time.Hour, 2
		c.IncidentMinCalls = -1
		c.Catalog.Models["broken-model"] = llmq.Model{OutputPricePer1M: outputPerToken * 1e6}
	})
	var msgs [][]byte
	for i := range 10 {
		msgs = append(msgs, []byte(fmt.Sprintf(`{"id":"broken-%d","tenant":"acme","project":"broken","body":{"model":"broken-model",
			"max_tokens":90,"messages":[{"role":"user","content":"hi"}]}}`, i)))
	}
	msgs = append(msgs, budgetJob("low", 0, llmq.PriorityLow), budgetJob("strict", 0, llmq.PriorityNormal))
	tb.publish(t, msgs...)

	require.Eventually(t, func() bool {
		return tb.count(t, `project = 'broken' AND status = 'dead_lettered'`) == 10 && tb.count(t, `project = 'strict' AND status = 'dead_lettered'`) == 1 &&
			tb.count(t, `project = 'low' AND status = 'queued' AND lease_token > 0`) == 1
	}, 30*time.Second, 20*time.Millisecond)
	broken := tb.budgetOf(t, "broken")
	require.Equal(t, []float64{0, 0}, []float64{broken.SpentUSD, broken.ReservedUSD}, "20 failed calls of 0.09 USD reserved each")
	require.Equal(t, 20, tb.count(t, `project = 'broken' AND attempts = 2`)*2)
	rec, err := tb.store.Jobs().Get(context.Background(), "acme", "low-000")
	require.NoError(t, err)
	require.Equal(t, store.WaitingReasonBudget, rec.WaitingReason)
	require.Zero(t, rec.Attempts)
	letters := tb.letters.all()
	var strict []dlq.Letter
	for _, l := range letters {
		if l.JobID == "strict-000" {
			strict = append(strict, l)
		}
	}
	require.Len(t, strict, 1)
	require.Equal(t, dlq.ReasonBudgetExceeded, strict[0].Reason)
	require.Equal(t, "budget: the day budget of acme/strict (1.00 USD) is spent", strict[0].LastError)
	require.Equal(t, 0.99, tb.budgetOf(t, "strict").SpentUSD)
}

// TestCapOutput: past 90% of a budget a call's output allowance is capped,
// in the field the body uses; a smaller allowance is kept.
func TestCapOutput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ body, want string }{
		{`{"model":"m","max_tokens":100}`, `{"max_tokens":20,"model":"m"}`},
		{`{"model":"m","max_completion_tokens":100}`, `{"max_completion_tokens":20,"model":"m"}`},
		{`{"model":"m"}`, `{"max_tokens":20,"model":"m"}`},
		{`{"model":"m","max_tokens":10}`, `{"model":"m","max_tokens":10}`},
	} {
		got, err := worker.CapOutput([]byte(tc.body), 20)
		require.NoError(t, err)
		require.JSONEq(t, tc.want, string(got), tc.body)
	}
}
