package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/store"
)

// callTwice records two calls of job id of tenant key's: a 429 after a
// wait for quota, then a success after the backoff.
func (b *testBundle) callTwice(t *testing.T, key, id string) {
	t.Helper()
	ctx := context.Background()
	require.Equal(t, http.StatusAccepted, b.post(t, key, `{"id":"`+id+`","body":`+validBody+`}`).status)
	l := b.claim(t, id)
	_, err := b.store.Queue().MarkCalling(ctx, l, store.PolicyState{Call: store.Call{Model: "gpt-4o-mini", QuotaWait: 300 * time.Millisecond}})
	require.NoError(t, err)
	b.clock.Advance(time.Second)
	require.NoError(t, b.store.Queue().MarkRetrying(ctx, l, store.PolicyState{Retries: 1, RateLimited: 1, Answered: &store.Answer{
		Attempt: 1, At: b.clock.Now(), Status: 429, Outcome: "rate_limited", ErrorCode: "rate_limit_exceeded",
		RetryAfter: 2 * time.Second, LimitRequests: 500, LimitTokens: 200000}}, "rate_limit_exceeded", "slow down"))
	b.clock.Advance(2 * time.Second)
	_, err = b.store.Queue().MarkCalling(ctx, l, store.PolicyState{Retries: 1, RateLimited: 1,
		Call: store.Call{Model: "gpt-4o-mini", QuotaWait: 100 * time.Millisecond, Backoff: 2 * time.Second}})
	require.NoError(t, err)
	b.clock.Advance(time.Second)
	_, err = b.store.Queue().StoreResult(ctx, l.Key, store.Result{Response: json.RawMessage(`{}`), UsedModel: "gpt-4o-mini",
		PromptTokens: 9, CompletionTokens: 3, Answered: &store.Answer{Attempt: 2, At: b.clock.Now(), Status: 200,
			Outcome: "success", PromptTokens: 9, CompletionTokens: 3}})
	require.NoError(t, err)
}

// TestJobCalls: GET /v1/jobs/{id} lists the job's calls with their waits
// and answers.
func TestJobCalls(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	start := b.clock.Now()
	b.callTwice(t, keyAcme, "j")
	require.Equal(t, http.StatusAccepted, b.post(t, keyAcme, `{"id":"fresh","body":`+validBody+`}`).status)
	require.NotContains(t, b.get(t, keyAcme, "/v1/jobs/fresh").json(t), "calls", "no call yet")

	var job api.Job
	r := b.get(t, keyAcme, "/v1/jobs/j")
	require.Equal(t, http.StatusOK, r.status)
	require.NoError(t, json.Unmarshal(r.body, &job))
	require.JSONEq(t, `[
		{"seq":1,"attempt":1,"model":"gpt-4o-mini","quota_wait_ms":300,"backoff_ms":0,
		 "started_at":"`+start.Format(time.RFC3339)+`","finished_at":"`+start.Add(time.Second).Format(time.RFC3339)+`",
		 "status":429,"outcome":"rate_limited","error_code":"rate_limit_exceeded","prompt_tokens":0,"completion_tokens":0,
		 "retry_after_ms":2000},
		{"seq":2,"attempt":2,"model":"gpt-4o-mini","quota_wait_ms":100,"backoff_ms":2000,
		 "started_at":"`+start.Add(3*time.Second).Format(time.RFC3339)+`","finished_at":"`+start.Add(4*time.Second).Format(time.RFC3339)+`",
		 "status":200,"outcome":"success","prompt_tokens":9,"completion_tokens":3}]`, string(mustJSON(t, job.Calls)))
	require.Equal(t, http.StatusNotFound, b.get(t, keyGlobex, "/v1/jobs/j").status, "another tenant's job")
}

// TestModelStats: GET /v1/stats/models counts the calls in scope per model
// and minute, a point for every minute of the window, with the limits the
// headers stated when none is configured.
func TestModelStats(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	start := b.clock.Now()
	b.callTwice(t, keyAcme, "a1")
	b.clock.Advance(time.Minute)
	b.callTwice(t, keyGlobex, "g1")

	var st api.ModelStats
	r := b.get(t, keyOps, "/v1/stats/models?window=15m")
	require.Equal(t, http.StatusOK, r.status)
	require.NoError(t, json.Unmarshal(r.body, &st))
	require.Equal(t, start.Add(-14*time.Minute).Truncate(time.Minute), st.Since)
	require.Len(t, st.Data, 1)
	m := st.Data[0]
	require.Equal(t, "gpt-4o-mini", m.Model)
	require.Equal(t, api.ModelLimits{RPM: 500, RPMSource: "headers", TPM: 200000, TPMSource: "headers"}, m.Limits)
	require.Len(t, m.Minutes, 16, "every minute of the window, the current one included")
	// Waits of 300 and 100 ms: the median is the second's bucket
	// (100-200 ms), the 95th percentile the first's (200-500 ms) capped
	// at the longest wait.
	point := api.ModelMinute{Requests: 2, RateLimited: 1, Tokens: 12, QuotaWaitMeanMS: 200, QuotaWaitP50MS: 200,
		QuotaWaitP95MS: 300, Concurrency: 2.0 / 60}
	point.Minute = start
	require.Equal(t, point, m.Minutes[14])
	point.Minute = start.Add(time.Minute)
	require.Equal(t, point, m.Minutes[15])
	require.Zero(t, m.Minutes[13].Requests)

	r = b.get(t, keyAcme, "/v1/stats/models?window=15m")
	require.NoError(t, json.Unmarshal(r.body, &st))
	require.Equal(t, int64(2), st.Data[0].Minutes[14].Requests)
	require.Zero(t, st.Data[0].Minutes[15].Requests, "a tenant sees its own jobs' calls only")

	for _, bad := range []string{"0s", "30s", "25h", "soon"} {
		r = b.get(t, keyAcme, "/v1/stats/models?window="+bad)
		require.Equal(t, http.StatusBadRequest, r.status, bad)
		require.Equal(t, "window", r.json(t)["error"].(map[string]any)["field"])
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// TestJobCallsNameTheirKey: a call made by an entry of a model's key pool
// shows the entry's name (never the key); a call without a pool shows none.
func TestJobCallsNameTheirKey(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	require.Equal(t, http.StatusAccepted, b.post(t, keyAcme, `{"id":"k","body":`+validBody+`}`).status)
	l := b.claim(t, "k")
	_, err := b.store.Queue().MarkCalling(context.Background(), l, store.PolicyState{Call: store.Call{Model: "gpt-4o-mini", Entry: "org-b"}})
	require.NoError(t, err)
	var job api.Job
	require.NoError(t, json.Unmarshal(b.get(t, keyAcme, "/v1/jobs/k").body, &job))
	require.Len(t, job.Calls, 1)
	require.Equal(t, "org-b", job.Calls[0].Entry)
	b.callTwice(t, keyAcme, "j")
	require.NotContains(t, string(mustJSON(t, b.get(t, keyAcme, "/v1/jobs/j").json(t)["calls"])), "entry")
}
