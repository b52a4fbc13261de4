package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/internal/chaos"
	"github.com/llmq/llmq/store"
)

// testTenants are the tenants the API of the tests is configured with.
var testTenants = llmq.Tenants{
	"acme": {Scope: llmq.Scope{Weight: 3, TPM: 90000, Priority: llmq.PriorityNormal},
		Projects: map[string]llmq.Scope{"support": {RPM: 60}}},
}

// TestUsage: a tenant sees its own scopes (configured, or with jobs
// finished today), with limits, weight and usage; an operator every
// tenant's.
func TestUsage(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	require.Equal(t, http.StatusAccepted, b.post(t, keyGlobex, `{"id":"g1","body":`+validBody+`}`).status)
	l := b.claim(t, "g1")
	_, err := b.store.Queue().MarkCalling(context.Background(), l, store.PolicyState{})
	require.NoError(t, err)
	_, err = b.store.Queue().StoreResult(context.Background(), l.Key, store.Result{UsedModel: "gpt-4o-mini", PromptTokens: 9, CompletionTokens: 3})
	require.NoError(t, err)

	acme := `{"tenant":"acme","weight":3,"limits":{"rpm":0,"tpm":90000,"concurrency":0,"priority":"normal"},
		"last_minute":{"requests":0,"tokens":0},"today":{"requests":0,"tokens":0}}`
	support := `{"tenant":"acme","project":"support","weight":1,"limits":{"rpm":60,"tpm":0,"concurrency":0},
		"last_minute":{"requests":0,"tokens":0},"today":{"requests":0,"tokens":0}}`
	globex := `{"tenant":"globex","weight":1,"limits":{"rpm":0,"tpm":0,"concurrency":0},
		"last_minute":{"requests":1,"tokens":12},"today":{"requests":1,"tokens":12}}`
	r := b.get(t, keyAcme, "/v1/usage")
	require.Equal(t, http.StatusOK, r.status)
	require.JSONEq(t, `{"data":[`+acme+`,`+support+`],"next_cursor":null}`, string(r.body))
	r = b.get(t, keyGlobex, "/v1/usage")
	require.JSONEq(t, `{"data":[`+globex+`],"next_cursor":null}`, string(r.body))
	r = b.get(t, keyOps, "/v1/usage")
	require.JSONEq(t, `{"data":[`+acme+`,`+support+`,`+globex+`],"next_cursor":null}`, string(r.body))
	r = b.get(t, keyOps, "/v1/usage?tenant=globex")
	require.JSONEq(t, `{"data":[`+globex+`],"next_cursor":null}`, string(r.body))
}

// TestUsageBudgets: GET /v1/usage shows each scope's budgets (limit,
// spent, reserved, state, policy); a job of a scope whose rejecting budget
// is spent is refused with 402 budget_exceeded naming the budget, the
// others are recorded.
func TestUsageBudgets(t *testing.T) {
	t.Parallel()
	tenants := llmq.Tenants{"acme": {Scope: llmq.Scope{MonthlyCost: 100},
		Projects: map[string]llmq.Scope{"strict": {DailyCost: 1, Overage: llmq.OverageReject}}},
		"globex": {Scope: llmq.Scope{DailyCost: 1, Overage: llmq.OverageReject}}}
	var budgets *store.Store
	b := setup(t, options{apiStore: func(c *api.Config, st *store.Store) {
		budgets = store.New(st.Pool(), store.WithClock(c.Clock), store.WithOrder(store.Order{Tenants: tenants}))
		c.Usage, c.Tenants, c.JobsDone = budgets.Budgets(), tenants, st.Jobs()
	}})
	ctx := context.Background()
	l := store.Lease{Key: store.Key{Tenant: "acme", ID: "earlier"}, Token: 1}
	_, err := budgets.Budgets().ReserveBudget(ctx, store.BudgetReservation{Lease: l, Project: "strict", CostUSD: 0.5, CappedCostUSD: 0.5})
	require.NoError(t, err)
	require.NoError(t, budgets.Budgets().SettleBudget(ctx, l, 0.25))
	l.ID = "in-flight"
	_, err = budgets.Budgets().ReserveBudget(ctx, store.BudgetReservation{Lease: l, Project: "strict", CostUSD: 0.5, CappedCostUSD: 0.5})
	require.NoError(t, err)

	r := b.get(t, keyAcme, "/v1/usage")
	require.Equal(t, http.StatusOK, r.status)
	require.JSONEq(t, `{"data":[
		{"tenant":"acme","weight":1,"limits":{"rpm":0,"tpm":0,"concurrency":0},
			"last_minute":{"requests":0,"tokens":0},"today":{"requests":0,"tokens":0},
			"budgets":[{"period":"month","period_start":"2026-11-01T00:00:00Z","limit_usd":100,"spent_usd":0.25,
				"reserved_usd":0.5,"state":"ok","overage":"queue"}]},
		{"tenant":"acme","project":"strict","weight":1,"limits":{"rpm":0,"tpm":0,"concurrency":0},
			"last_minute":{"requests":0,"tokens":0},"today":{"requests":0,"tokens":0},
			"budgets":[{"period":"day","period_start":"2026-11-30T00:00:00Z","limit_usd":1,"spent_usd":0.25,
				"reserved_usd":0.5,"state":"70","overage":"reject"}]}
		],"next_cursor":null}`, string(r.body))
	require.Equal(t, http.StatusAccepted, b.post(t, keyAcme, `{"id":"s1","project":"strict","body":`+validBody+`}`).status,
		"75% spent or reserved: recorded")

	// A call that does not fit is refused at the budget: from then on the
	// API refuses the project's jobs until the period rolls over.
	l.ID = "too-big"
	out, err := budgets.Budgets().ReserveBudget(ctx, store.BudgetReservation{Lease: l, Project: "strict", CostUSD: 0.3, CappedCostUSD: 0.3})
	require.NoError(t, err)
	require.True(t, out.Exceeded)
	r = b.post(t, keyAcme, `{"id":"s2","project":"strict","body":`+validBody+`}`)
	require.Equal(t, http.StatusPaymentRequired, r.status)
	require.JSONEq(t, `{"error":{"code":"budget_exceeded","field":"project","message":"the day budget of project acme/strict `+
		`(1.00 USD) is spent (0.75 USD spent or reserved); its overage policy is reject: new jobs are refused until 2026-12-01T00:00:00Z"}}`,
		string(r.body))
	r = b.post(t, keyAcme, `{"jobs":[{"id":"s3","body":`+validBody+`},{"id":"s4","project":"strict","body":`+validBody+`}]}`)
	require.Equal(t, http.StatusPaymentRequired, r.status)
	require.Contains(t, string(r.body), `"field":"jobs[1].project"`)
	require.Equal(t, http.StatusAccepted, b.post(t, keyAcme, `{"id":"s5","body":`+validBody+`}`).status,
		"the tenant's own budget (queue) is not spent")

	// Gateway mode answers in OpenAI's shape.
	l = store.Lease{Key: store.Key{Tenant: "globex", ID: "all"}, Token: 1}
	_, err = budgets.Budgets().ReserveBudget(ctx, store.BudgetReservation{Lease: l, CostUSD: 1, CappedCostUSD: 1})
	require.NoError(t, err)
	r = b.do(t, http.MethodPost, "/v1/chat/completions", keyGlobex, "application/json", []byte(validBody))
	require.Equal(t, http.StatusPaymentRequired, r.status)
	require.Contains(t, string(r.body), `"code":"budget_exceeded"`)
	require.Contains(t, string(r.body), `the day budget of tenant globex (1.00 USD) is spent (1.00 USD spent or reserved)`)
}

// TestBudgetReadFailureIsUnavailable: when the budgets cannot be read
// (Postgres away), a job of a scope with a rejecting budget is refused as
// a publish would be: 503 database_unavailable with Retry-After, nothing
// recorded; a gateway call 503 too, in OpenAI's shape.
func TestBudgetReadFailureIsUnavailable(t *testing.T) {
	t.Parallel()
	tenants := llmq.Tenants{"acme": {Scope: llmq.Scope{DailyCost: 1, Overage: llmq.OverageReject}}}
	p, err := chaos.New("127.0.0.1:5432")
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	b := setup(t, options{apiStore: func(c *api.Config, st *store.Store) {
		url := st.Pool().Config().ConnString()
		require.Contains(t, url, "127.0.0.1:5432")
		pool, err := pgxpool.New(context.Background(), strings.Replace(url, "127.0.0.1:5432", p.Addr(), 1))
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		c.Usage, c.Tenants, c.JobsDone = store.New(pool, store.WithClock(c.Clock), store.WithOrder(store.Order{Tenants: tenants})).Budgets(), tenants, st.Jobs()
	}})
	p.Cut()
	r := b.post(t, keyAcme, `{"id":"a1","body":`+validBody+`}`)
	require.Equal(t, http.StatusServiceUnavailable, r.status, string(r.body))
	require.Contains(t, string(r.body), `"code":"database_unavailable"`)
	require.Equal(t, "5", r.header.Get("Retry-After"))
	r = b.do(t, http.MethodPost, "/v1/chat/completions", keyAcme, "application/json", []byte(validBody))
	require.Equal(t, http.StatusServiceUnavailable, r.status, string(r.body))
	require.Contains(t, string(r.body), `"code":"unavailable"`)
	require.Equal(t, "5", r.header.Get("Retry-After"))

	p.Restore()
	require.Equal(t, http.StatusAccepted, b.post(t, keyAcme, `{"id":"a1","body":`+validBody+`}`).status, "recorded once Postgres is back")
}
