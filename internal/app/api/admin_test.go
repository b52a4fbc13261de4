package api_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/internal/tenancy"
	"github.com/llmq/llmq/store"
)

// adminBundle is a bundle whose API serves the tenancy kept as data, its
// store (the jobs' waiting reasons) reading the same live tenants.
func adminBundle(t *testing.T, mutate ...func(*api.Config, *store.Store)) (*testBundle, *tenancy.Watcher) {
	t.Helper()
	var w *tenancy.Watcher
	b := setup(t, options{apiStore: func(c *api.Config, st *store.Store) {
		for _, m := range mutate {
			m(c, st)
		}
		live := store.New(st.Pool(), store.WithClock(c.Clock),
			store.WithOrder(store.Order{Live: func() llmq.Tenants { return w.Tenants() }}))
		w = tenancy.New(live.Tenancy(), tenancy.Config{Logger: quiet})
		require.NoError(t, w.Load(context.Background()))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			w.Run(ctx)
		}()
		t.Cleanup(func() {
			cancel()
			<-done
		})
		c.Store, c.Tenancy, c.TenancyStore, c.JobsDone = live.Jobs(), w, live.Tenancy(), live.Jobs()
	}})
	return b, w
}

func hashOf(key string) [sha256.Size]byte { return sha256.Sum256([]byte(key)) }

// admin sends an admin request with headers.
func (b *testBundle) admin(t *testing.T, method, path, key, body string, header ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, b.srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := b.srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close() //nolint:errcheck
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

// TestAdminTenantsETag: an update or delete needs If-Match (428), a stale
// one is refused (412) and changes nothing; the ETag moves with each
// change; tenant keys are refused (403).
func TestAdminTenantsETag(t *testing.T) {
	t.Parallel()
	b, _ := adminBundle(t)
	require.Equal(t, http.StatusForbidden, b.admin(t, http.MethodGet, "/v1/admin/tenants", keyAcme, "").status)
	r := b.admin(t, http.MethodPost, "/v1/admin/tenants", keyOps, `{"name":"initech","tpm":1000,"weight":2}`)
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	require.Equal(t, `"1"`, r.header.Get("ETag"))
	require.Equal(t, http.StatusConflict, b.admin(t, http.MethodPost, "/v1/admin/tenants", keyOps, `{"name":"initech"}`).status)

	r = b.admin(t, http.MethodPut, "/v1/admin/tenants/initech", keyOps, `{"tpm":2000}`)
	require.Equal(t, http.StatusPreconditionRequired, r.status)
	require.Equal(t, "If-Match", r.apiError(t).Field)
	r = b.admin(t, http.MethodPut, "/v1/admin/tenants/initech", keyOps, `{"tpm":2000}`, "If-Match", `"1"`)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	require.Equal(t, `"2"`, r.header.Get("ETag"))
	// A second admin who read version 1 does not overwrite it.
	r = b.admin(t, http.MethodPut, "/v1/admin/tenants/initech", keyOps, `{"tpm":5}`, "If-Match", `"1"`)
	require.Equal(t, http.StatusPreconditionFailed, r.status)
	require.Equal(t, http.StatusPreconditionFailed, b.admin(t, http.MethodDelete, "/v1/admin/tenants/initech", keyOps, "", "If-Match", `"1"`).status)
	require.Equal(t, http.StatusPreconditionRequired, b.admin(t, http.MethodDelete, "/v1/admin/tenants/initech", keyOps, "").status)
	var got api.AdminTenant
	require.NoError(t, json.Unmarshal(b.admin(t, http.MethodGet, "/v1/admin/tenants/initech", keyOps, "").body, &got))
	require.InDelta(t, 2000, got.TPM, 0)
	require.Zero(t, got.Weight, "a PUT replaces the whole scope")
	require.Equal(t, http.StatusNoContent, b.admin(t, http.MethodDelete, "/v1/admin/tenants/initech", keyOps, "", "If-Match", `"2"`).status)
	require.Equal(t, http.StatusNotFound, b.admin(t, http.MethodGet, "/v1/admin/tenants/initech", keyOps, "").status)
}

// TestAdminBadInput: each bad input is refused with 400 naming its field,
// and changes nothing.
func TestAdminBadInput(t *testing.T) {
	t.Parallel()
	b, _ := adminBundle(t)
	r := b.admin(t, http.MethodPost, "/v1/admin/tenants", keyOps, `{"name":"initech"}`)
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	for _, c := range []struct{ method, path, body, field string }{
		{http.MethodPost, "/v1/admin/tenants", `{"name":"x","tpm":-1}`, "tpm"},
		{http.MethodPost, "/v1/admin/tenants", `{"name":"x","weight":-0.5}`, "weight"},
		{http.MethodPost, "/v1/admin/tenants", `{"name":"x","concurrency":"ten"}`, "concurrency"},
		{http.MethodPost, "/v1/admin/tenants", `{"name":"x","daily_cost":-3}`, "daily_cost"},
		{http.MethodPost, "/v1/admin/tenants", `{"name":"x","tmp":5}`, "tmp"},
		{http.MethodPost, "/v1/admin/tenants", `{"name":"no/slash"}`, "name"},
		{http.MethodPut, "/v1/admin/tenants/initech/projects/bulk", `{"rpm":-2}`, "rpm"},
		{http.MethodPost, "/v1/admin/keys", `{"name":"k","tenant":"initech","expires_at":"2020-01-01T00:00:00Z"}`, "expires_at"},
		{http.MethodPost, "/v1/admin/keys", `{"name":"k","tenant":"nobody"}`, "tenant"},
	} {
		r := b.admin(t, c.method, c.path, keyOps, c.body)
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", c.body, r.body)
		require.Equal(t, c.field, r.apiError(t).Field, "%s: %s", c.body, r.body)
	}
	var list struct{ Data []api.AdminTenant }
	require.NoError(t, json.Unmarshal(b.admin(t, http.MethodGet, "/v1/admin/tenants", keyOps, "").body, &list))
	require.Len(t, list.Data, 1, "nothing was created")
	require.Empty(t, list.Data[0].Projects)
}

// TestAdminKeys: a key is shown once, at its creation, and works at once;
// its name is never reused; once revoked it is refused, and it stays
// listed with its revocation. The audit log names the operator key, never
// a key.
func TestAdminKeys(t *testing.T) {
	t.Parallel()
	b, w := adminBundle(t)
	require.Equal(t, http.StatusCreated, b.admin(t, http.MethodPost, "/v1/admin/tenants", keyOps, `{"name":"initech"}`).status)
	r := b.admin(t, http.MethodPost, "/v1/admin/keys", keyOps, `{"name":"ci","tenant":"initech","expires_at":"2027-01-01T00:00:00Z"}`)
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	var k api.AdminKey
	require.NoError(t, json.Unmarshal(r.body, &k))
	require.True(t, strings.HasPrefix(k.Key, api.KeyPrefix))
	// Waited for in the watcher's snapshot, not by calls with the key:
	// each refused call counts against the address's failed
	// authentications, and over 30 a minute a valid key is refused too.
	require.Eventually(t, func() bool { _, ok := w.Snapshot().Key(hashOf(k.Key), time.Now()); return ok }, 5*time.Second, time.Millisecond)
	me := b.get(t, k.Key, "/v1/me").json(t)
	require.Equal(t, "initech", me["tenant"])

	r = b.admin(t, http.MethodGet, "/v1/admin/keys/ci", keyOps, "")
	require.NotContains(t, string(r.body), k.Key, "never shown again")
	r = b.admin(t, http.MethodGet, "/v1/admin/keys", keyOps, "")
	require.NotContains(t, string(r.body), k.Key)
	var got api.AdminKey
	require.NoError(t, json.Unmarshal(b.admin(t, http.MethodGet, "/v1/admin/keys/ci", keyOps, "").body, &got))
	require.NotNil(t, got.LastUsedAt, "its use is recorded")

	r = b.admin(t, http.MethodPost, "/v1/admin/keys", keyOps, `{"name":"ci","tenant":"initech"}`)
	require.Equal(t, http.StatusConflict, r.status)
	require.Equal(t, "name", r.apiError(t).Field)

	require.Equal(t, http.StatusOK, b.admin(t, http.MethodPost, "/v1/admin/keys/ci/revoke", keyOps, "").status)
	require.Eventually(t, func() bool { _, ok := w.Snapshot().Key(hashOf(k.Key), time.Now()); return !ok }, 5*time.Second, time.Millisecond)
	require.Equal(t, http.StatusUnauthorized, b.get(t, k.Key, "/v1/me").status)
	require.NoError(t, json.Unmarshal(b.admin(t, http.MethodGet, "/v1/admin/keys/ci", keyOps, "").body, &got))
	require.NotNil(t, got.RevokedAt)

	var audit struct{ Data []api.AdminAuditEntry }
	r = b.admin(t, http.MethodGet, "/v1/admin/audit", keyOps, "")
	require.NoError(t, json.Unmarshal(r.body, &audit))
	require.NotContains(t, string(r.body), k.Key)
	require.Len(t, audit.Data, 3)
	for i, want := range []string{"revoke key ci", "create key ci", "create tenant initech"} {
		e := audit.Data[i]
		require.Equal(t, want, e.Action+" "+e.Kind+" "+e.Name)
		require.Equal(t, "operator ops", e.Actor, "the operator key by its name")
	}
}

// TestAdminPause: a paused tenant's queued jobs wait with reason paused
// and its gateway calls are refused with 429; resumed, they are served
// again; a paused project's jobs wait with reason paused.
func TestAdminPause(t *testing.T) {
	t.Parallel()
	b, w := adminBundle(t)
	// acme is a tenant of the configured keys: a row to pause.
	require.Equal(t, http.StatusCreated, b.admin(t, http.MethodPost, "/v1/admin/tenants", keyOps, `{"name":"acme"}`).status)
	r := b.post(t, keyAcme, `{"id":"j1","body":`+validBody+`}`)
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	require.Equal(t, http.StatusOK, b.admin(t, http.MethodPost, "/v1/admin/tenants/acme/pause", keyOps, "").status)
	require.Eventually(t, func() bool { return w.Tenants()["acme"].Paused }, 5*time.Second, time.Millisecond)
	require.Equal(t, "paused", b.get(t, keyAcme, "/v1/jobs/j1").json(t)["waiting_reason"])
	call := func() response {
		req, err := http.NewRequest(http.MethodPost, b.srv.URL+"/v1/chat/completions", bytes.NewBufferString(validBody))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+keyAcme)
		req.Header.Set("Content-Type", "application/json")
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		resp, err := b.srv.Client().Do(req.WithContext(ctx))
		if err != nil {
			return response{} // waiting for a worker: not refused
		}
		defer resp.Body.Close() //nolint:errcheck
		data, _ := io.ReadAll(resp.Body)
		return response{status: resp.StatusCode, body: data}
	}
	r = call()
	require.Equal(t, http.StatusTooManyRequests, r.status, string(r.body))
	require.Contains(t, string(r.body), `tenant \"acme\" is paused`)

	require.Equal(t, http.StatusOK, b.admin(t, http.MethodPost, "/v1/admin/tenants/acme/resume", keyOps, "").status)
	require.Equal(t, http.StatusCreated, b.admin(t, http.MethodPut, "/v1/admin/tenants/acme/projects/bulk", keyOps, `{"paused":true}`).status)
	require.Eventually(t, func() bool { return !w.Tenants()["acme"].Paused && w.Tenants()["acme"].Projects["bulk"].Paused },
		5*time.Second, time.Millisecond)
	require.NotEqual(t, "paused", b.get(t, keyAcme, "/v1/jobs/j1").json(t)["waiting_reason"], "resumed")
	require.NotEqual(t, http.StatusTooManyRequests, call().status, "the tenant's calls are served")
	r = b.post(t, keyAcme, `{"id":"j2","project":"bulk","body":`+validBody+`}`)
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	require.Equal(t, "paused", b.get(t, keyAcme, "/v1/jobs/j2").json(t)["waiting_reason"])
}

// TestAdminKeysKeepTheirRateLimits: the request limits of keys and
// tenants kept as data hold whatever other keys are used between two
// requests (their limiters are not forgotten).
func TestAdminKeysKeepTheirRateLimits(t *testing.T) {
	t.Parallel()
	b, w := adminBundle(t, func(c *api.Config, _ *store.Store) { c.RateLimits.TenantRPM = 2 })
	keys := make([]string, 3)
	for i := range keys {
		name := string(rune('a' + i))
		require.Equal(t, http.StatusCreated, b.admin(t, http.MethodPost, "/v1/admin/tenants", keyOps, `{"name":"t`+name+`"}`).status)
		r := b.admin(t, http.MethodPost, "/v1/admin/keys", keyOps, `{"name":"k`+name+`","tenant":"t`+name+`"}`)
		require.Equal(t, http.StatusCreated, r.status, string(r.body))
		var k api.AdminKey
		require.NoError(t, json.Unmarshal(r.body, &k))
		keys[i] = k.Key
	}
	require.Eventually(t, func() bool { _, ok := w.Snapshot().Key(hashOf(keys[2]), time.Now()); return ok }, 5*time.Second, time.Millisecond)
	for range 2 {
		for _, k := range keys {
			require.Equal(t, http.StatusOK, b.get(t, k, "/v1/me").status)
		}
	}
	for _, k := range keys {
		require.Equal(t, http.StatusTooManyRequests, b.get(t, k, "/v1/me").status, "the third request of a minute")
	}
}
