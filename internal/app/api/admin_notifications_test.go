package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/store"
)

func notificationsBundle(t *testing.T) *testBundle {
	t.Helper()
	b, _ := adminBundle(t, func(c *api.Config, st *store.Store) {
		c.TenantNotifications = store.NewTenantNotifications(st)
	})
	return b
}

// TestAdminTenantNotifications: a tenant's route is created once, changed
// on the ETag read (428 without, 412 stale), deleted with If-Match; a
// rotated secret is in the rotation's answer only (every read, the list
// and the audit log show fingerprints); tenant keys are refused.
func TestAdminTenantNotifications(t *testing.T) {
	t.Parallel()
	b := notificationsBundle(t)
	const path = "/v1/admin/tenants/acme/notifications"
	require.Equal(t, http.StatusForbidden, b.admin(t, http.MethodGet, path, keyAcme, "").status)
	require.Equal(t, http.StatusNotFound, b.admin(t, http.MethodGet, path, keyOps, "").status)
	r := b.admin(t, http.MethodPut, path, keyOps, `{"reply_to":"acme-results","webhook":"https://acme.example/hook"}`)
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	require.Equal(t, `"1"`, r.header.Get("ETag"))
	require.Equal(t, http.StatusConflict, b.admin(t, http.MethodPut, path, keyOps, `{"reply_to":"x"}`).status)
	r = b.admin(t, http.MethodPut, path, keyOps, `{"reply_to":"acme-2"}`, "If-Match", `"1"`)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	require.Equal(t, `"2"`, r.header.Get("ETag"))
	require.Equal(t, http.StatusPreconditionFailed, b.admin(t, http.MethodPut, path, keyOps, `{"reply_to":"x"}`, "If-Match", `"1"`).status)

	r = b.admin(t, http.MethodPost, path+"/secrets", keyOps, "")
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	var created api.AdminNewSecret
	require.NoError(t, json.Unmarshal(r.body, &created))
	require.True(t, strings.HasPrefix(created.Secret, "whsec_"))
	require.Equal(t, []api.AdminSecret{{Fingerprint: store.SecretFingerprint(created.Secret), Role: "current"}}, created.Notifications.Secrets)
	r = b.admin(t, http.MethodPost, path+"/secrets", keyOps, "")
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	var second api.AdminNewSecret
	require.NoError(t, json.Unmarshal(r.body, &second))
	require.Equal(t, []string{"current", "previous"}, []string{second.Notifications.Secrets[0].Role, second.Notifications.Secrets[1].Role})
	require.Equal(t, store.SecretFingerprint(created.Secret), second.Notifications.Secrets[1].Fingerprint)

	r = b.admin(t, http.MethodGet, path, keyOps, "")
	require.Equal(t, http.StatusOK, r.status)
	var got api.AdminTenantNotifications
	require.NoError(t, json.Unmarshal(r.body, &got))
	require.Equal(t, "acme-2", got.ReplyTo)
	require.Empty(t, got.Webhook, "a PUT replaces the whole route")
	require.Len(t, got.Secrets, 2)
	for _, p := range []string{path, "/v1/admin/notifications", "/v1/admin/audit"} {
		body := string(b.admin(t, http.MethodGet, p, keyOps, "").body)
		require.NotContains(t, body, "whsec_", p)
	}

	r = b.admin(t, http.MethodDelete, path+"/secrets/previous", keyOps, "")
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	require.NoError(t, json.Unmarshal(r.body, &got))
	require.Len(t, got.Secrets, 1)
	require.Equal(t, http.StatusPreconditionRequired, b.admin(t, http.MethodDelete, path, keyOps, "").status)
	require.Equal(t, http.StatusNoContent, b.admin(t, http.MethodDelete, path, keyOps, "", "If-Match", r.header.Get("ETag")).status)
	require.Equal(t, http.StatusNotFound, b.admin(t, http.MethodGet, path, keyOps, "").status)
}

// TestAdminTenantNotificationsBadInput: each bad input is refused with
// 400 naming its field, and creates nothing.
func TestAdminTenantNotificationsBadInput(t *testing.T) {
	t.Parallel()
	b := notificationsBundle(t)
	for _, c := range []struct{ path, body, field string }{
		{"/v1/admin/tenants/acme/notifications", `{"webhook":"http://plain.example"}`, "webhook"},
		{"/v1/admin/tenants/acme/notifications", `{"reply_to":"` + strings.Repeat("q", 1100) + `"}`, "reply_to"},
		{"/v1/admin/tenants/acme/notifications", `{"reply_to":5}`, "reply_to"},
		{"/v1/admin/tenants/acme/notifications", `{"results_topic":"x"}`, "results_topic"},
		{"/v1/admin/tenants/*/notifications", `{"reply_to":"x"}`, "reply_to"},
		{"/v1/admin/tenants/no%20space/notifications", `{"reply_to":"x"}`, "tenant"},
	} {
		r := b.admin(t, http.MethodPut, c.path, keyOps, c.body)
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", c.body, r.body)
		require.Equal(t, c.field, r.apiError(t).Field, "%s: %s", c.body, r.body)
	}
	var list struct {
		Data []api.AdminTenantNotifications
	}
	require.NoError(t, json.Unmarshal(b.admin(t, http.MethodGet, "/v1/admin/notifications", keyOps, "").body, &list))
	require.Empty(t, list.Data)
	r := b.admin(t, http.MethodPost, "/v1/admin/tenants/*/notifications/secrets", keyOps, "")
	require.Equal(t, http.StatusCreated, r.status, "* takes secrets: %s", r.body)
}
