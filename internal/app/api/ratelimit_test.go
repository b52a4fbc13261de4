package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/store"
)

// doWith is b.do with extra request headers, answered within 10 s (a
// gateway call that waits fails the test).
func (b *testBundle) doWith(t *testing.T, method, path, key string, h http.Header, body string) response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, b.srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header = h.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := b.srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

// openAIError reads an answer in OpenAI's error shape.
func (r response) openAIError(t *testing.T) (code, typ, msg string) {
	t.Helper()
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(r.body, &e), "%s", r.body)
	return e.Error.Code, e.Error.Type, e.Error.Message
}

// TestKeyAndTenantRPM: a key past its requests per minute gets 429
// rate_limit_exceeded with Retry-After, naming the limit, without using
// its tenant's; another key of the tenant then finds the tenant's limit;
// another tenant is untouched; time refills both.
func TestKeyAndTenantRPM(t *testing.T) {
	t.Parallel()
	const keyAcme2 = "key-acme-2"
	b := setup(t, options{api: func(c *api.Config) {
		c.Keys[keyAcme2] = "acme"
		c.RateLimits = api.RateLimitConfig{KeyRPM: 3, TenantRPM: 4}
		c.JobsDone = c.Store.(*store.Jobs)
	}})
	for range 3 {
		require.Equal(t, http.StatusOK, b.get(t, keyAcme, "/v1/me").status)
	}
	r := b.get(t, keyAcme, "/v1/me")
	require.Equal(t, http.StatusTooManyRequests, r.status, "%s", r.body)
	require.Equal(t, "20", r.header.Get("Retry-After"), "3 a minute: one every 20 s")
	e := r.apiError(t)
	require.Equal(t, api.CodeRateLimited, e.Code)
	require.Equal(t, "the API key is over its limit of 3 requests per minute (rate_limits.key_rpm): retry in 20 s", e.Message)

	// The refused request took nothing of acme's 4: one is left.
	require.Equal(t, http.StatusOK, b.get(t, keyAcme2, "/v1/me").status)
	r = b.get(t, keyAcme2, "/v1/models")
	require.Equal(t, http.StatusTooManyRequests, r.status, "%s", r.body)
	require.Equal(t, "15", r.header.Get("Retry-After"), "4 a minute: one every 15 s")
	code, typ, msg := r.openAIError(t)
	require.Equal(t, api.CodeRateLimited, code)
	require.Equal(t, "rate_limit_error", typ)
	require.Equal(t, `tenant "acme" is over its limit of 4 requests per minute (rate_limits.tenant_rpm): retry in 15 s`, msg)

	require.Equal(t, http.StatusOK, b.get(t, keyGlobex, "/v1/me").status, "another tenant is untouched")
	b.clock.Advance(20 * time.Second)
	require.Equal(t, http.StatusOK, b.get(t, keyAcme, "/v1/me").status)
	require.Equal(t, http.StatusTooManyRequests, b.get(t, keyAcme2, "/v1/me").status, "the tenant's refill went to keyAcme")
	requireCounter(t, b, "key_rpm", 1)
	requireCounter(t, b, "tenant_rpm", 2)
}

// requireCounter checks llmq_api_rate_limited_total{limit}.
func requireCounter(t *testing.T, b *testBundle, limit string, want float64) {
	t.Helper()
	mfs, err := b.registry.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "llmq_api_rate_limited_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == limit {
				require.Equal(t, want, m.GetCounter().GetValue(), limit)
				return
			}
		}
	}
	require.Zero(t, want, "no llmq_api_rate_limited_total{limit=%q}", limit)
}

// TestAuthFailuresThrottled: past its failed authentications, an address
// (the last entry of the trusted proxy's header, an IPv6 address as its
// /64) is refused even with a good key until its bucket refills; other
// addresses are not.
func TestAuthFailuresThrottled(t *testing.T) {
	t.Parallel()
	b := setup(t, options{api: func(c *api.Config) {
		c.RateLimits = api.RateLimitConfig{AuthFailuresPerMinute: 2, TrustedProxyHeader: "X-Forwarded-For"}
	}})
	from := func(addr string) http.Header {
		// The client's own entry first, then the proxy's: only the last counts.
		return http.Header{"X-Forwarded-For": {"198.51.100.1, " + addr}}
	}
	require.Equal(t, http.StatusUnauthorized, b.doWith(t, "GET", "/v1/me", "wrong-1", from("203.0.113.7"), "").status)
	require.Equal(t, http.StatusUnauthorized, b.doWith(t, "GET", "/v1/me", "", from("203.0.113.7"), "").status)
	r := b.doWith(t, "GET", "/v1/me", keyAcme, from("203.0.113.7"), "")
	require.Equal(t, http.StatusTooManyRequests, r.status, "%s", r.body)
	require.Equal(t, "30", r.header.Get("Retry-After"))
	e := r.apiError(t)
	require.Equal(t, api.CodeRateLimited, e.Code)
	require.Equal(t, "too many failed authentications from this address: over 2 per minute "+
		"(rate_limits.auth_failures_per_minute): retry in 30 s", e.Message)
	require.Equal(t, http.StatusOK, b.doWith(t, "GET", "/v1/me", keyAcme, from("198.51.100.1"), "").status,
		"the client's own entry is not its address")
	require.Equal(t, http.StatusOK, b.get(t, keyAcme, "/v1/me").status, "no header: the peer's address")

	require.Equal(t, http.StatusUnauthorized, b.doWith(t, "GET", "/v1/me", "wrong", from("2001:db8::1"), "").status)
	require.Equal(t, http.StatusUnauthorized, b.doWith(t, "GET", "/v1/me", "wrong", from("2001:db8::2"), "").status)
	require.Equal(t, http.StatusTooManyRequests, b.doWith(t, "GET", "/v1/me", keyAcme, from("2001:db8::ffff"), "").status,
		"one /64")
	require.Equal(t, http.StatusOK, b.doWith(t, "GET", "/v1/me", keyAcme, from("2001:db8:0:1::1"), "").status)

	b.clock.Advance(30 * time.Second)
	require.Equal(t, http.StatusOK, b.doWith(t, "GET", "/v1/me", keyAcme, from("203.0.113.7"), "").status)
	requireCounter(t, b, "auth_failures", 2)
}

// TestGatewayMaxDeadline: X-LLMQ-Deadline past gateway.max_deadline is
// refused naming it; an SDK's longer X-Stainless-Timeout is cut to it.
func TestGatewayMaxDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t, options{api: func(c *api.Config) {
		c.JobsDone = c.Store.(*store.Jobs)
		c.Gateway.MaxDeadline = 20 * time.Minute
	}})
	call := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	r := b.doWith(t, "POST", "/v1/chat/completions", keyAcme, http.Header{"X-Llmq-Deadline": {"1201"}}, call)
	require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
	code, _, msg := r.openAIError(t)
	require.Equal(t, "invalid_value", code)
	require.Equal(t, "is 1201 s from now, past the 1200 s a call may wait (gateway.max_deadline)", msg)
	far := b.clock.Now().Add(time.Hour).Format(time.RFC3339)
	require.Equal(t, http.StatusBadRequest,
		b.doWith(t, "POST", "/v1/chat/completions", keyAcme, http.Header{"X-Llmq-Deadline": {far}}, call).status)

	// The SDK's hour is cut to 20 minutes: the call waits for its job.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", b.srv.URL+"/v1/chat/completions", strings.NewReader(call))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+keyAcme)
	req.Header.Set("X-Stainless-Timeout", "3600")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := b.srv.Client().Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	rec := waitForJobs(t, b, "acme", 1)[0]
	require.NotNil(t, rec.Deadline)
	require.Equal(t, b.clock.Now().Add(20*time.Minute).UTC(), rec.Deadline.UTC())
	cancel()
	<-done
}

// TestGatewayMaxWaiting: a tenant's call past gateway.max_waiting waiting
// calls gets 429 too_many_waiting_calls and enqueues nothing; another
// tenant's call is taken.
func TestGatewayMaxWaiting(t *testing.T) {
	t.Parallel()
	b := setup(t, options{api: func(c *api.Config) {
		c.JobsDone = c.Store.(*store.Jobs)
		c.Gateway.MaxWaiting = 2
	}})
	call := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var done []chan struct{}
	wait := func(key string) {
		req, err := http.NewRequestWithContext(ctx, "POST", b.srv.URL+"/v1/chat/completions", bytes.NewReader(call))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		ch := make(chan struct{})
		done = append(done, ch)
		go func() {
			defer close(ch)
			if resp, err := b.srv.Client().Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	wait(keyAcme)
	wait(keyAcme)
	waitForJobs(t, b, "acme", 2)
	r := b.doWith(t, "POST", "/v1/chat/completions", keyAcme, nil, string(call))
	require.Equal(t, http.StatusTooManyRequests, r.status, "%s", r.body)
	require.Equal(t, "5", r.header.Get("Retry-After"))
	code, typ, msg := r.openAIError(t)
	require.Equal(t, api.CodeTooManyWaiting, code)
	require.Equal(t, "rate_limit_error", typ)
	require.Equal(t, `tenant "acme" has 2 gateway calls waiting, the most it may (gateway.max_waiting): nothing was enqueued, retry when one ends`, msg)
	require.Len(t, waitForJobs(t, b, "acme", 2), 2, "nothing enqueued")
	wait(keyGlobex)
	waitForJobs(t, b, "globex", 1)
	requireCounter(t, b, "gateway_waiting", 1)
	cancel()
	for _, ch := range done {
		<-ch
	}
}

// waitForJobs returns tenant's jobs once there are n.
func waitForJobs(t *testing.T, b *testBundle, tenant string, n int) []*store.JobRecord {
	t.Helper()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if recs, _, err := b.store.Jobs().List(context.Background(), store.ListOptions{Tenant: tenant}); err == nil && len(recs) == n {
			return recs
		}
		select {
		case <-deadline:
			t.Fatalf("tenant %s has not %d jobs after 10 s", tenant, n)
		case <-tick.C:
		}
	}
}

// TestAuthFailuresOfInProcessCalls: calls made in-process on a client's
// behalf (the console's, api.WithClient) count against that client's
// address, not one shared by every console user.
func TestAuthFailuresOfInProcessCalls(t *testing.T) {
	t.Parallel()
	b := setup(t, options{api: func(c *api.Config) { c.RateLimits.AuthFailuresPerMinute = 1 }})
	call := func(peer, key string) int {
		origin := httptest.NewRequest("POST", "/ui/login", nil)
		origin.RemoteAddr = peer
		req := httptest.NewRequestWithContext(api.WithClient(context.Background(), origin), "GET", "/v1/me", nil)
		req.RemoteAddr = ""
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		b.api.ServeHTTP(rec, req)
		return rec.Code
	}
	require.Equal(t, http.StatusUnauthorized, call("203.0.113.9:4000", "wrong"))
	require.Equal(t, http.StatusTooManyRequests, call("203.0.113.9:4001", keyAcme))
	require.Equal(t, http.StatusOK, call("203.0.113.10:4000", keyAcme))
}
