package console_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/internal/tenancy"
	"github.com/llmq/llmq/store"
)

// TestTenantsPage: an operator's console lists the tenants kept as data,
// pauses and resumes one with a form that carries the session's CSRF
// token (a forged token changes nothing), and shows the audit log; a
// tenant's session has no such page.
func TestTenantsPage(t *testing.T) {
	t.Parallel()
	var w *tenancy.Watcher
	b := setupWith(t, func(c *api.Config, st *store.Store) {
		w = tenancy.New(st.Tenancy(), tenancy.Config{Logger: quiet})
		c.Tenancy, c.TenancyStore = w, st.Tenancy()
	})
	ctx := context.Background()
	_, err := b.store.Tenancy().Import(ctx, llmq.Tenants{"acme": {Scope: llmq.Scope{TPM: 60000}}, "globex": {}}, nil)
	require.NoError(t, err)
	require.NoError(t, w.Load(ctx))

	ops := b.browser(t)
	require.Equal(t, http.StatusSeeOther, ops.signIn(keyOps).status)
	p := ops.get("/ui/tenants")
	require.Equal(t, http.StatusOK, p.status, p.body)
	row := p.body[strings.Index(p.body, `data-tenant="acme"`):]
	row = row[:strings.Index(row, "</tr>")]
	require.Contains(t, row, `<span class="badge b-succeeded">running</span>`)
	require.Contains(t, row, `60,000`)
	require.Contains(t, row, `action="/ui/tenants/acme/pause"`)

	forged := ops.post("/ui/tenants/acme/pause", url.Values{"csrf": {"forged"}})
	require.Equal(t, http.StatusForbidden, forged.status)
	r, err := b.store.Tenancy().Tenant(ctx, "acme")
	require.NoError(t, err)
	require.False(t, r.Scope.Paused, "a forged form changes nothing")

	p = ops.post("/ui/tenants/acme/pause", url.Values{"csrf": {csrf(t, p)}})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	require.Equal(t, "/ui/tenants?done=paused", p.header.Get("Location"))
	p = ops.get("/ui/tenants?done=paused")
	require.Contains(t, p.body, "The tenant is paused")
	row = p.body[strings.Index(p.body, `data-tenant="acme"`):]
	row = row[:strings.Index(row, "</tr>")]
	require.Contains(t, row, `<span class="badge b-failed">paused</span>`)
	require.Contains(t, row, `action="/ui/tenants/acme/resume"`)
	audit := p.body[strings.Index(p.body, "data-audit"):]
	require.Contains(t, audit, api.OperatorName(api.OperatorKey{Key: keyOps}))
	require.Contains(t, audit, "update")
	require.Regexp(t, `tenant <span class="mono">acme</span>`, audit)
	require.Contains(t, audit, "&#34;paused&#34;:true")

	p = ops.post("/ui/tenants/acme/resume", url.Values{"csrf": {csrf(t, p)}})
	require.Equal(t, "/ui/tenants?done=resumed", p.header.Get("Location"))
	r, err = b.store.Tenancy().Tenant(ctx, "acme")
	require.NoError(t, err)
	require.False(t, r.Scope.Paused)
	require.Less(t, time.Since(r.UpdatedAt), time.Minute)

	// New limits from the row's form, the other settings kept; a form of
	// a version changed since is refused, not applied.
	page := ops.get("/ui/tenants")
	version := regexp.MustCompile(`action="/ui/tenants/acme/limits"[\s\S]*?name="version" value="(\d+)"`).FindStringSubmatch(page.body)
	require.NotNil(t, version, page.body)
	form := url.Values{"csrf": {csrf(t, page)}, "version": {version[1]}, "tpm": {"90000"}, "weight": {"2"}}
	p = ops.post("/ui/tenants/acme/limits", form)
	require.Equal(t, "/ui/tenants?done=tenant-updated", p.header.Get("Location"), p.body)
	r, err = b.store.Tenancy().Tenant(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, llmq.Scope{TPM: 90000, Weight: 2}, r.Scope)
	p = ops.post("/ui/tenants/acme/limits", form)
	require.Equal(t, http.StatusPreconditionFailed, p.status, "the same form again: the tenant changed since")
	require.Contains(t, p.body, "If-Match: the tenant changed since the version you read")
	_, err = b.store.Tenancy().UpdateTenant(ctx, "ops", store.TenantRow{Name: "acme", Scope: llmq.Scope{TPM: 90000, Weight: 2, DailyCost: 5}}, 0)
	require.NoError(t, err)
	page = ops.get("/ui/tenants")
	version = regexp.MustCompile(`action="/ui/tenants/acme/limits"[\s\S]*?name="version" value="(\d+)"`).FindStringSubmatch(page.body)
	p = ops.post("/ui/tenants/acme/limits", url.Values{"csrf": {csrf(t, page)}, "version": {version[1]}, "tpm": {"1000"}, "weight": {"2"}})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	r, err = b.store.Tenancy().Tenant(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, llmq.Scope{TPM: 1000, Weight: 2, DailyCost: 5}, r.Scope, "the budget kept")

	// A tenant and a key from the page's forms; a refused form names its field.
	token := csrf(t, ops.get("/ui/tenants"))
	p = ops.post("/ui/tenants", url.Values{"csrf": {token}, "name": {"initech"}, "tpm": {"-5"}})
	require.Equal(t, http.StatusBadRequest, p.status)
	require.Contains(t, p.body, "tpm: must be a finite number, not negative")
	p = ops.post("/ui/tenants", url.Values{"csrf": {token}, "name": {"initech"}, "tpm": {"5000"}})
	require.Equal(t, "/ui/tenants?done=tenant-created", p.header.Get("Location"))
	p = ops.post("/ui/keys", url.Values{"csrf": {token}, "name": {"ci"}, "tenant": {"initech"}, "expires_days": {"30"}})
	require.Equal(t, http.StatusCreated, p.status, p.body)
	m := regexp.MustCompile(`<code class="mono">(llmq_[^<]+)</code>`).FindStringSubmatch(p.body)
	require.NotNil(t, m, p.body)
	require.Eventually(t, func() bool { _ = w.Load(ctx); return b.apiStatus(t, m[1]) == http.StatusOK }, 5*time.Second, 10*time.Millisecond)
	p = ops.get("/ui/tenants")
	require.NotContains(t, p.body, m[1], "shown once")
	require.Contains(t, p.body, `data-key="ci"`)
	p = ops.post("/ui/keys", url.Values{"csrf": {token}, "name": {"ci"}, "tenant": {"initech"}})
	require.Equal(t, http.StatusConflict, p.status)
	require.Contains(t, p.body, "name: the name is taken")
	p = ops.post("/ui/keys/ci/revoke", url.Values{"csrf": {token}})
	require.Equal(t, "/ui/tenants?done=key-revoked", p.header.Get("Location"))
	require.NoError(t, w.Load(ctx))
	require.Equal(t, http.StatusUnauthorized, b.apiStatus(t, m[1]))

	tenant := b.browser(t)
	require.Equal(t, http.StatusSeeOther, tenant.signIn(keyAcme).status)
	require.NotContains(t, tenant.get("/ui/").body, `href="/ui/tenants"`)
	require.Equal(t, http.StatusForbidden, tenant.get("/ui/tenants").status)
}

// apiStatus is the status of GET /v1/me with key.
func (b *bundle) apiStatus(t *testing.T, key string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.srv.URL+"/v1/me", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestTenantsPageModels: the operators' tenants page lists the models kept
// as data and sets a model's limits with a form that names its version
// (a form of a version changed since is refused), its other settings
// kept; a refused value names its field.
func TestTenantsPageModels(t *testing.T) {
	t.Parallel()
	b := setupWith(t, func(c *api.Config, st *store.Store) {
		c.Tenancy, c.TenancyStore = tenancy.New(st.Tenancy(), tenancy.Config{Logger: quiet}), st.Tenancy()
	})
	ctx := context.Background()
	_, err := b.store.Tenancy().ImportModels(ctx, map[string]llmq.Model{"org/big": {RPM: 60, TPM: 6000, InputPricePer1M: 2}})
	require.NoError(t, err)
	ops := b.browser(t)
	require.Equal(t, http.StatusSeeOther, ops.signIn(keyOps).status)
	page := ops.get("/ui/tenants")
	require.Equal(t, http.StatusOK, page.status, page.body)
	row := page.body[strings.Index(page.body, `data-model="org/big"`):]
	row = row[:strings.Index(row, "</tr>")]
	require.Contains(t, row, "6,000")
	version := regexp.MustCompile(`name="version" value="(\d+)"`).FindStringSubmatch(row)
	require.NotNil(t, version, row)

	form := url.Values{"csrf": {csrf(t, page)}, "model": {"org/big"}, "version": {version[1]}, "rpm": {"120"}, "tpm": {"9000"}}
	p := ops.post("/ui/models/limits", form)
	require.Equal(t, "/ui/tenants?done=model-updated", p.header.Get("Location"), p.body)
	m, err := b.store.Tenancy().Model(ctx, "org/big")
	require.NoError(t, err)
	require.Equal(t, llmq.Model{RPM: 120, TPM: 9000, InputPricePer1M: 2}, m.Model, "the price kept")
	p = ops.post("/ui/models/limits", form)
	require.Equal(t, http.StatusPreconditionFailed, p.status, "the same form again: the model changed since")
	form.Set("version", "2")
	form.Set("rpm", "-1")
	p = ops.post("/ui/models/limits", form)
	require.Equal(t, http.StatusBadRequest, p.status)
	require.Contains(t, p.body, "rpm: must not be negative")
	audit := ops.get("/ui/tenants").body
	audit = audit[strings.Index(audit, "data-audit"):]
	require.Regexp(t, `model <span class="mono">org/big</span>`, audit)
}
