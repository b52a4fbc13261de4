package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/store"
)

// ids returns the job ids of a GET /v1/jobs answer, in order.
func ids(t *testing.T, r response) []string {
	t.Helper()
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var l api.List[api.Job]
	require.NoError(t, json.Unmarshal(r.body, &l))
	out := []string{}
	for _, j := range l.Data {
		out = append(out, j.Tenant+"/"+j.ID)
	}
	return out
}

// TestOperatorSeesAndActsOnEveryTenant: an operator key lists every
// tenant's jobs (the tenant parameter narrows), reads and cancels a job
// once it names its tenant, and enqueues for a tenant; a tenant key stays
// in its tenant whatever it sends.
func TestOperatorSeesAndActsOnEveryTenant(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	require.Equal(t, http.StatusAccepted, b.post(t, keyAcme, jobJSON("a1")).status)
	b.clock.Advance(time.Second)
	require.Equal(t, http.StatusAccepted, b.post(t, keyGlobex, jobJSON("g1")).status)
	b.clock.Advance(time.Second)

	require.Equal(t, []string{"globex/g1", "acme/a1"}, ids(t, b.get(t, keyOps, "/v1/jobs")))
	require.Equal(t, []string{"acme/a1"}, ids(t, b.get(t, keyOps, "/v1/jobs?tenant=acme")))
	require.Equal(t, []string{"acme/a1"}, ids(t, b.get(t, keyAcme, "/v1/jobs")))
	require.Equal(t, []string{"acme/a1"}, ids(t, b.get(t, keyAcme, "/v1/jobs?tenant=acme")), "its own tenant is fine")
	r := b.get(t, keyAcme, "/v1/jobs?tenant=globex")
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Equal(t, api.Error{Code: api.CodeTenantMismatch, Field: "tenant",
		Message: `the API key acts for tenant "acme"; omit tenant or send "acme"`}, r.apiError(t))
	require.Equal(t, http.StatusBadRequest, b.get(t, keyAcme, "/v1/jobs/g1?tenant=globex").status)
	require.Equal(t, http.StatusNotFound, b.get(t, keyAcme, "/v1/jobs/g1").status)
	require.Equal(t, "invalid_value", b.get(t, keyOps, "/v1/jobs?tenant=a%20b").apiError(t).Code)

	// One job: its tenant is named.
	r = b.get(t, keyOps, "/v1/jobs/g1")
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Equal(t, "tenant", r.apiError(t).Field)
	job := b.get(t, keyOps, "/v1/jobs/g1?tenant=globex").json(t)
	require.Equal(t, "globex", job["tenant"])
	require.Equal(t, map[string]any{"model": "gpt-4o-mini", "messages": []any{map[string]any{"role": "user", "content": "hi"}}},
		job["body"], "the single job carries its request")
	require.Equal(t, http.StatusNotFound, b.get(t, keyOps, "/v1/jobs/g1?tenant=acme").status)
	r = b.do(t, http.MethodDelete, "/v1/jobs/g1?tenant=globex", keyOps, "", nil)
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, "cancelled", r.json(t)["status"])
	require.NotContains(t, b.get(t, keyAcme, "/v1/jobs").json(t)["data"].([]any)[0], "body", "lists carry no request")

	// Enqueueing: the tenant parameter, else the job's own tenant.
	r = b.do(t, http.MethodPost, "/v1/jobs?tenant=acme", keyOps, "application/json", []byte(jobJSON("op1")))
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	require.Equal(t, "acme", r.json(t)["tenant"])
	r = b.do(t, http.MethodPost, "/v1/jobs?tenant=acme", keyOps, "application/json", []byte(`{"tenant":"globex","body":`+validBody+`}`))
	require.Equal(t, api.CodeTenantMismatch, r.apiError(t).Code)
	r = b.post(t, keyOps, `{"id":"op2","tenant":"globex","body":`+validBody+`}`)
	require.Equal(t, "globex", r.json(t)["tenant"])

	// Who is who.
	require.Equal(t, map[string]any{"tenant": "acme", "operator": false}, b.get(t, keyAcme, "/v1/me").json(t))
	require.Equal(t, map[string]any{"tenant": nil, "operator": true}, b.get(t, keyOps, "/v1/me").json(t))
}

// TestJobCounts: the jobs in scope by status, every status listed.
func TestJobCounts(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	for _, id := range []string{"a1", "a2", "a3"} {
		require.Equal(t, http.StatusAccepted, b.post(t, keyAcme, jobJSON(id)).status)
	}
	require.Equal(t, http.StatusAccepted, b.post(t, keyGlobex, jobJSON("g1")).status)
	require.Equal(t, http.StatusOK, b.do(t, http.MethodDelete, "/v1/jobs/a1", keyAcme, "", nil).status)
	want := func(tenant any, queued, cancelled float64) map[string]any {
		by := map[string]any{}
		for _, s := range llmq.Statuses {
			by[string(s)] = 0.0
		}
		by["queued"], by["cancelled"] = queued, cancelled
		return map[string]any{"tenant": tenant, "by_status": by, "total": queued + cancelled, "limit": float64(store.CountLimitDefault), "at_least": []any{}}
	}
	require.Equal(t, want("acme", 2, 1), b.get(t, keyAcme, "/v1/stats/jobs").json(t))
	require.Equal(t, want("globex", 1, 0), b.get(t, keyGlobex, "/v1/stats/jobs").json(t))
	require.Equal(t, want(nil, 3, 1), b.get(t, keyOps, "/v1/stats/jobs").json(t))
	require.Equal(t, want("globex", 1, 0), b.get(t, keyOps, "/v1/stats/jobs?tenant=globex").json(t))
}

// deadLetter records a dead letter of tenant's job id (its job
// dead-lettered) at the bundle's clock.
func (b *testBundle) deadLetter(t *testing.T, tenant, id string, reason dlq.Reason) {
	t.Helper()
	ctx := context.Background()
	j, err := llmq.Decode([]byte(jobJSON(id)), llmq.DecodeOptions{})
	require.NoError(t, err)
	j.Tenant = tenant
	_, err = b.store.Jobs().Insert(ctx, j)
	require.NoError(t, err)
	require.NoError(t, b.letters.DeadLetter(ctx, dlq.Letter{JobID: id, Tenant: tenant, Reason: reason,
		LastError: "boom", Attempts: 3, Model: "gpt-4o-mini", Message: []byte(jobJSON(id))}))
}

// TestDeadLettersAcrossTenants: counts by reason, bulk replay and purge
// stay in the key's tenant; an operator works on every tenant's letters;
// purge and replay refuse a request that names no letters.
func TestDeadLettersAcrossTenants(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.deadLetter(t, "acme", "a1", dlq.ReasonRetriesExhausted)
	b.deadLetter(t, "acme", "a2", dlq.ReasonRetriesExhausted)
	b.clock.Advance(time.Hour)
	b.deadLetter(t, "acme", "a3", dlq.ReasonPermanentError)
	b.deadLetter(t, "globex", "g1", dlq.ReasonRetriesExhausted)

	counts := func(key, query string) map[string][2]float64 {
		r := b.get(t, key, "/v1/dead-letters/reasons"+query)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		out := map[string][2]float64{}
		for _, e := range r.json(t)["data"].([]any) {
			m := e.(map[string]any)
			out[m["reason"].(string)] = [2]float64{m["count"].(float64), m["not_replayed"].(float64)}
		}
		return out
	}
	zero := [2]float64{}
	require.Equal(t, map[string][2]float64{"retries_exhausted": {2, 2}, "permanent_error": {1, 1}, "poison": zero, "expired": zero, "delivery_limit": zero, "model_not_allowed": zero, "budget_exceeded": zero, "unknown_project": zero, "tenant_queue_full": zero},
		counts(keyAcme, ""))
	require.Equal(t, map[string][2]float64{"retries_exhausted": {3, 3}, "permanent_error": {1, 1}, "poison": zero, "expired": zero, "delivery_limit": zero, "model_not_allowed": zero, "budget_exceeded": zero, "unknown_project": zero, "tenant_queue_full": zero},
		counts(keyOps, ""))
	since := b.clock.Now().Add(-time.Minute).Format(time.RFC3339)
	require.Equal(t, map[string][2]float64{"retries_exhausted": {1, 1}, "permanent_error": {1, 1}, "poison": zero, "expired": zero, "delivery_limit": zero, "model_not_allowed": zero, "budget_exceeded": zero, "unknown_project": zero, "tenant_queue_full": zero},
		counts(keyOps, "?since="+since))

	// Empty filters are refused, even though a tenant key's tenant is set.
	post := func(key, path, body string) response {
		return b.do(t, http.MethodPost, path, key, "application/json", []byte(body))
	}
	require.Equal(t, api.CodeEmptyFilter, post(keyAcme, "/v1/dead-letters/purge", `{}`).apiError(t).Code)
	require.Equal(t, api.CodeEmptyFilter, post(keyAcme, "/v1/dead-letters/replay", `{}`).apiError(t).Code)
	require.Equal(t, "all", post(keyAcme, "/v1/dead-letters/replay", `{"all":true}`).apiError(t).Field)
	require.Equal(t, "reason", post(keyAcme, "/v1/dead-letters/replay", `{"reason":"oops"}`).apiError(t).Field)

	// acme replays its retries_exhausted letters: globex's stays.
	r := post(keyAcme, "/v1/dead-letters/replay", `{"reason":"retries_exhausted"}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Equal(t, map[string]any{"replayed": 2.0, "already_replayed": 0.0, "failed": []any{}, "more": false}, r.json(t))
	r = post(keyAcme, "/v1/dead-letters/replay", `{"reason":"retries_exhausted"}`)
	require.Equal(t, map[string]any{"replayed": 0.0, "already_replayed": 2.0, "failed": []any{}, "more": false}, r.json(t))
	require.Equal(t, "queued", b.get(t, keyAcme, "/v1/jobs/a1").json(t)["status"])
	require.Equal(t, "dead_lettered", b.get(t, keyGlobex, "/v1/jobs/g1").json(t)["status"])
	require.Equal(t, [2]float64{3, 1}, counts(keyOps, "")["retries_exhausted"])

	// An operator replays across tenants, or one tenant's.
	r = post(keyOps, "/v1/dead-letters/replay?tenant=globex", `{"reason":"retries_exhausted"}`)
	require.Equal(t, 1.0, r.json(t)["replayed"])
	require.Equal(t, "queued", b.get(t, keyGlobex, "/v1/jobs/g1").json(t)["status"])

	// Purge: acme's "all" is acme's letters; the operator's tenant counts
	// as a filter.
	require.Equal(t, map[string]any{"purged": 3.0}, post(keyAcme, "/v1/dead-letters/purge", `{"all":true}`).json(t))
	require.Equal(t, 1.0, counts(keyOps, "")["retries_exhausted"][0])
	require.Equal(t, map[string]any{"purged": 1.0}, post(keyOps, "/v1/dead-letters/purge?tenant=globex", `{}`).json(t))
	require.Equal(t, 0.0, b.get(t, keyOps, "/v1/dead-letters/reasons").json(t)["total"])

	// The single-letter endpoints follow the operator's scope too.
	b.deadLetter(t, "globex", "g2", dlq.ReasonExpired)
	var list api.List[dlq.View]
	require.NoError(t, json.Unmarshal(b.get(t, keyOps, "/v1/dead-letters").body, &list))
	require.Len(t, list.Data, 1)
	id := list.Data[0].ID
	path := "/v1/dead-letters/" + jsonNumber(id)
	require.Equal(t, http.StatusOK, b.get(t, keyOps, path).status)
	require.Equal(t, http.StatusNotFound, b.get(t, keyAcme, path).status)
	require.Equal(t, http.StatusNotFound, b.get(t, keyOps, path+"?tenant=acme").status)
	require.Equal(t, []dlq.View{}, deadLetters(t, b.get(t, keyOps, "/v1/dead-letters?tenant=acme")))
	r = b.do(t, http.MethodPost, path+"/replay", keyOps, "", nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Equal(t, true, r.json(t)["replayed"])
}

func jsonNumber(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func deadLetters(t *testing.T, r response) []dlq.View {
	t.Helper()
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var l api.List[dlq.View]
	require.NoError(t, json.Unmarshal(r.body, &l))
	return l.Data
}

// TestBatchesForOperators: tenant keys cannot see provider batches (they
// hold several tenants' jobs); an operator lists one, reads its jobs per
// status and cancels it at the provider.
func TestBatchesForOperators(t *testing.T) {
	t.Parallel()
	b := setup(t, options{batches: true})
	require.Equal(t, http.StatusAccepted, b.post(t, keyAcme, jobJSON("a1")).status)
	require.Equal(t, http.StatusAccepted, b.post(t, keyGlobex, jobJSON("g1")).status)
	id := b.batch(t, "a1", "g1")

	for _, key := range []string{keyAcme, keyGlobex} {
		r := b.get(t, key, "/v1/batches")
		require.Equal(t, http.StatusForbidden, r.status)
		require.Equal(t, api.CodeForbidden, r.apiError(t).Code)
		require.Equal(t, http.StatusForbidden, b.get(t, key, "/v1/batches/"+id).status)
		require.Equal(t, http.StatusForbidden, b.do(t, http.MethodPost, "/v1/batches/"+id+"/cancel", key, "", nil).status)
	}
	var list api.List[api.Batch]
	require.NoError(t, json.Unmarshal(b.get(t, keyOps, "/v1/batches?open=true").body, &list))
	require.Len(t, list.Data, 1)
	got := list.Data[0]
	require.Equal(t, id, got.ID)
	require.Equal(t, 2, got.JobCount)
	require.True(t, got.Open)
	require.Nil(t, got.JobsByStatus, "lists carry no per-status counts")

	var one api.Batch
	require.NoError(t, json.Unmarshal(b.get(t, keyOps, "/v1/batches/"+id).body, &one))
	require.Equal(t, map[string]int{"batched": 2}, one.JobsByStatus)
	require.NoError(t, json.Unmarshal(b.get(t, keyOps, "/v1/batches/"+got.ProviderBatchID).body, &one), "by the provider's id too")
	require.Equal(t, id, one.ID)

	r := b.do(t, http.MethodPost, "/v1/batches/"+id+"/cancel", keyOps, "", nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Contains(t, []string{"cancelling", "cancelled"}, r.json(t)["status"])
	stored, err := b.store.Batches().GetBatch(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, r.json(t)["status"], stored.Status, "the provider's answer is recorded")
}
