package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/producer"
)

// lowBatch is a POST /v1/jobs body of n low-priority jobs, ids prefix-i.
func lowBatch(prefix string, n int) string {
	jobs := make([]string, n)
	for i := range jobs {
		jobs[i] = fmt.Sprintf(`{"id":"%s-%d","priority":"low","body":%s}`, prefix, i, validBody)
	}
	return `{"jobs":[` + strings.Join(jobs, ",") + `]}`
}

// TestTenantQueueFull: one tenant posting batch after batch is refused
// with 429 tenant_queue_full at its share of the queue, and another
// tenant's single job is accepted meanwhile (before, the queue's one hard
// depth refused both with queue_full). With a hard depth of 20, acme alone
// may hold 10 (half: room is kept for another tenant). Each tenant is told
// its own depth, share and wait, in the headers and GET /v1/queue; an
// operator sees every tenant.
func TestTenantQueueFull(t *testing.T) {
	t.Parallel()
	b := setup(t, options{producer: func(c *producer.Config) {
		c.SoftDepth, c.HardDepth, c.QuotaRatePerMin = 8, 20, 60
	}})
	r := b.post(t, keyAcme, lowBatch("a1", 10))
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	require.Equal(t, "ok", r.header.Get(api.HeaderBackpressure), "measured before the batch")
	r = b.post(t, keyAcme, lowBatch("a2", 10))
	require.Equal(t, http.StatusTooManyRequests, r.status, "%s", r.body)
	e := r.apiError(t)
	require.Equal(t, api.CodeTenantQueueFull, e.Code)
	require.Equal(t, `tenant "acme" holds 10 jobs, at its share of the queue (10): retry later; other tenants are admitted`, e.Message)
	require.Equal(t, "12", r.header.Get("Retry-After"), "down to its soft share 4, at its half of the quotas' 60/min")
	require.Equal(t, "rejecting", r.header.Get(api.HeaderBackpressure))
	require.Equal(t, "10", r.header.Get(api.HeaderQueueDepth))
	require.Equal(t, "10", r.header.Get(api.HeaderQueueShare))
	require.Equal(t, "20", r.header.Get(api.HeaderEstimatedWait))
	require.Equal(t, http.StatusNotFound, b.get(t, keyAcme, "/v1/jobs/a2-0").status, "nothing recorded")

	r = b.post(t, keyGlobex, jobJSON("g1"))
	require.Equal(t, http.StatusAccepted, r.status, "another tenant is accepted: %s", r.body)
	require.Equal(t, map[string]string{api.HeaderBackpressure: "ok", api.HeaderQueueDepth: "0", api.HeaderQueueShare: "10",
		api.HeaderEstimatedWait: "0"}, map[string]string{api.HeaderBackpressure: r.header.Get(api.HeaderBackpressure),
		api.HeaderQueueDepth: r.header.Get(api.HeaderQueueDepth), api.HeaderQueueShare: r.header.Get(api.HeaderQueueShare),
		api.HeaderEstimatedWait: r.header.Get(api.HeaderEstimatedWait)}, "globex's own figures")

	now := b.clock.Now().UTC().Format(time.RFC3339)
	require.Equal(t, map[string]any{"tenant": "globex", "depth": 1.0, "lag": 0.0, "queued": 1.0, "in_flight": 0.0,
		"completion_rate_per_min": 30.0, "estimated_drain_seconds": 2.0, "state": "ok", "measured_at": now,
		"weight": 1.0, "soft_share": 4.0, "hard_share": 10.0}, b.get(t, keyGlobex, "/v1/queue").json(t), "globex sees its own part only")
	acme := b.get(t, keyAcme, "/v1/queue").json(t)
	require.Equal(t, []any{10.0, "rejecting"}, []any{acme["depth"], acme["state"]})

	all := b.get(t, keyOps, "/v1/queue").json(t)
	require.Nil(t, all["tenant"])
	require.Equal(t, []any{11.0, "throttled"}, []any{all["depth"], all["state"]}, "the whole queue: 11 of soft 8, hard 20")
	var tenants []string
	for _, q := range all["tenants"].([]any) {
		q := q.(map[string]any)
		tenants = append(tenants, fmt.Sprintf("%s:%.0f", q["tenant"], q["depth"]))
	}
	require.Equal(t, []string{"acme:10", "globex:1"}, tenants, "an operator sees every tenant")
	one := b.get(t, keyOps, "/v1/queue?tenant=globex").json(t)
	require.Equal(t, []any{"globex", 1.0}, []any{one["tenant"], one["depth"]})
}

// TestProjectQueueFull: a project at its hard depth is refused with 429
// tenant_queue_full naming it, the tenant's other projects admitted.
func TestProjectQueueFull(t *testing.T) {
	t.Parallel()
	tenants := llmq.Tenants{"acme": {Projects: map[string]llmq.Scope{"bulk": {SoftDepth: 1, HardDepth: 2}, "web": {}}}}
	b := setup(t, options{producer: func(c *producer.Config) { c.Tenants = tenants }, api: func(c *api.Config) { c.Tenants = tenants }})
	job := func(id, project string) string {
		return fmt.Sprintf(`{"id":%q,"project":%q,"body":%s}`, id, project, validBody)
	}
	r := b.post(t, keyAcme, `{"jobs":[`+job("b1", "bulk")+`,`+job("b2", "bulk")+`]}`)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	r = b.post(t, keyAcme, `{"jobs":[`+job("w1", "web")+`,`+job("b3", "bulk")+`]}`)
	require.Equal(t, http.StatusTooManyRequests, r.status, "%s", r.body)
	require.Equal(t, api.Error{Code: api.CodeTenantQueueFull, Field: "jobs[1].project",
		Message: `project "bulk" holds 2 jobs, at its hard depth: retry later; other projects are admitted`}, r.apiError(t))
	require.NotEmpty(t, r.header.Get("Retry-After"))
	r = b.post(t, keyAcme, job("w1", "web"))
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
}
