package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/store"
)

// callTwice claims acme's job id and records two calls: a 429 after
// 300 ms waiting for quota, then a success after a 2 s backoff.
func (b *bundle) callTwice(t *testing.T, id string) {
	t.Helper()
	ctx := context.Background()
	recs, err := b.store.Queue().Claim(ctx, store.ClaimRequest{Model: "gpt-4o-mini", Owner: "w", Lease: time.Minute, Limit: 1})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, id, recs[0].ID)
	l := recs[0].Lease()
	_, err = b.store.Queue().MarkCalling(ctx, l, store.PolicyState{Call: store.Call{Model: "gpt-4o-mini", QuotaWait: 300 * time.Millisecond}})
	require.NoError(t, err)
	require.NoError(t, b.store.Queue().MarkRetrying(ctx, l, store.PolicyState{Retries: 1, Answered: &store.Answer{Attempt: 1,
		At: time.Now(), Status: 429, Outcome: "rate_limited", ErrorCode: "rate_limit_exceeded", RetryAfter: 2 * time.Second}},
		"rate_limit_exceeded", "slow down"))
	_, err = b.store.Queue().MarkCalling(ctx, l, store.PolicyState{Retries: 1, Call: store.Call{Model: "gpt-4o-mini", Backoff: 2 * time.Second}})
	require.NoError(t, err)
	_, err = b.store.Queue().StoreResult(ctx, l.Key, store.Result{Response: json.RawMessage(`{}`), UsedModel: "gpt-4o-mini",
		PromptTokens: 9, CompletionTokens: 3, Answered: &store.Answer{Attempt: 2, At: time.Now(), Status: 200,
			Outcome: "success", PromptTokens: 9, CompletionTokens: 3}})
	require.NoError(t, err)
}

// TestJobPageCalls: the job page lists the calls GET /v1/jobs/{id} gives,
// with their waits and answers, and the job's changes of state; a job
// with no call says so.
func TestJobPageCalls(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueue(t, keyAcme, "called")
	b.callTwice(t, "called")
	b.enqueue(t, keyAcme, "waiting")
	br := b.browser(t)
	require.Equal(t, http.StatusSeeOther, br.signIn(keyAcme).status)

	p := br.get("/ui/jobs/called")
	require.Equal(t, http.StatusOK, p.status)
	require.Contains(t, p.body, `2 upstream calls`)
	require.Contains(t, p.body, `<tr data-call="1">`)
	require.Contains(t, p.body, `<td class="num" data-quota-wait-ms="300">300 ms</td>`)
	require.Contains(t, p.body, `<td data-status="429"><span class="swatch c-rate_limited"></span> 429 rate_limited <span class="faint mono">rate_limit_exceeded</span></td>`)
	require.Contains(t, p.body, `<td class="num" data-backoff-ms="2000">2 s</td>`)
	require.Contains(t, p.body, `<td data-status="200"><span class="swatch c-success"></span> 200 success</td>`)
	require.Contains(t, p.body, `<td class="num" data-tokens>12</td>`)
	require.Contains(t, p.body, `call 1 to gpt-4o-mini, after 300 ms waiting for quota`)
	require.Contains(t, p.body, `answered 429 (rate limited) rate_limit_exceeded · retry after 2 s`)
	require.Contains(t, p.body, `call 2 to gpt-4o-mini, after 2 s backing off`)
	require.Contains(t, p.body, `answered 200 (success) · 12 tokens`)
	require.Contains(t, p.body, `· succeeded</li>`)
	require.Contains(t, p.body, `<svg class="timeline"`)

	p = br.get("/ui/jobs/waiting")
	require.Contains(t, p.body, `No upstream call yet`)
	require.NotContains(t, p.body, `<svg class="timeline"`)
}

// TestOverviewModelCharts: the overview draws each model's calls as GET
// /v1/stats/models counts them, for the key's tenant; with no call it
// says what will appear.
func TestOverviewModelCharts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueue(t, keyAcme, "called")
	b.callTwice(t, "called")
	acme := b.browser(t)
	require.Equal(t, http.StatusSeeOther, acme.signIn(keyAcme).status)
	p := acme.get("/ui/")
	require.Equal(t, http.StatusOK, p.status)
	require.Contains(t, p.body, `data-metric="model-gpt-4o-mini-requests">2</span>`)
	require.Contains(t, p.body, `data-metric="model-gpt-4o-mini-tokens">12</span>`)
	require.Contains(t, p.body, `data-metric="model-gpt-4o-mini-rate-limited">1</span>`)
	require.Contains(t, p.body, `50.0% of the calls`)
	require.Contains(t, p.body, `data-metric="model-gpt-4o-mini-quota-wait">150 ms</span>`)
	require.Contains(t, p.body, `peak 2/min, no limit known`)
	live := acme.get("/ui/live/overview")
	require.Contains(t, live.body, `data-metric="model-gpt-4o-mini-requests">2</span>`, "the live part redraws the charts")

	globex := b.browser(t)
	require.Equal(t, http.StatusSeeOther, globex.signIn(keyGlobex).status)
	p = globex.get("/ui/")
	require.Contains(t, p.body, `No upstream calls in the last hour`, "another tenant's calls are not shown")
	require.NotContains(t, p.body, `data-metric="model-`)
}
