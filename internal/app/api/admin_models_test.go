package api_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/store"
)

// TestAdminModels: models are created, read, replaced with If-Match and
// deleted; once the table was written its rows are the catalog the API
// applies (a job naming a model created is accepted, one deleted is
// refused); bad input gets 400 naming its field and changes nothing: a
// fallback naming an unknown model, a negative or non-number limit, an
// unknown setting; a model another falls back to is not deleted (409);
// every change is in the audit log with the operator key's name.
func TestAdminModels(t *testing.T) {
	t.Parallel()
	b, w := adminBundle(t, func(c *api.Config, _ *store.Store) {
		c.Catalog = llmq.Catalog{Models: map[string]llmq.Model{"gpt-4o-mini": {}}}
	})
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	require.Equal(t, http.StatusBadRequest, b.post(t, keyAcme, `{"body":{"model":"org/big",`+msgs+`}}`).status, "not in the catalog yet")

	require.Equal(t, http.StatusForbidden, b.admin(t, http.MethodGet, "/v1/admin/models", keyAcme, "").status)
	r := b.admin(t, http.MethodPost, "/v1/admin/models", keyOps, `{"name":"org/small","rpm":600,"tpm":60000}`)
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	r = b.admin(t, http.MethodPost, "/v1/admin/models", keyOps, `{"name":"org/big","rpm":60,"tpm":6000,"concurrency":4,"fallbacks":["org/small"]}`)
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	require.Equal(t, `"1"`, r.header.Get("ETag"))
	require.Equal(t, http.StatusConflict, b.admin(t, http.MethodPost, "/v1/admin/models", keyOps, `{"name":"org/big"}`).status)
	require.Eventually(t, func() bool { _, ok := w.Snapshot().Models["org/big"]; return ok }, 5*time.Second, time.Millisecond)
	require.Equal(t, http.StatusAccepted, b.post(t, keyAcme, `{"body":{"model":"org/big",`+msgs+`}}`).status, "the rows are the catalog")
	require.Equal(t, http.StatusBadRequest, b.post(t, keyAcme, `{"body":{"model":"gpt-4o-mini",`+msgs+`}}`).status,
		"the configuration's catalog no longer applies")

	for _, c := range []struct{ method, path, body, field, code string }{
		{http.MethodPost, "/v1/admin/models", `{"name":"x","fallbacks":["nope"]}`, "fallbacks[0]", api.CodeUnknownModel},
		{http.MethodPost, "/v1/admin/models", `{"name":"x","rpm":-1}`, "rpm", llmq.CodeInvalidValue},
		{http.MethodPost, "/v1/admin/models", `{"name":"x","tpm":"lots"}`, "tpm", llmq.CodeInvalidType},
		{http.MethodPost, "/v1/admin/models", `{"name":"x","rpn":5}`, "rpn", llmq.CodeInvalidValue},
		{http.MethodPost, "/v1/admin/models", `{"name":"has space"}`, "name", llmq.CodeInvalidValue},
		{http.MethodPost, "/v1/admin/models", `{"name":"x","batch_discount":2}`, "batch_discount", llmq.CodeInvalidValue},
	} {
		r := b.admin(t, c.method, c.path, keyOps, c.body)
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", c.body, r.body)
		require.Equal(t, c.field, r.apiError(t).Field, "%s: %s", c.body, r.body)
		require.Equal(t, c.code, r.apiError(t).Code, "%s: %s", c.body, r.body)
	}

	r = b.admin(t, http.MethodPut, "/v1/admin/models/org/big", keyOps, `{"tpm":9000}`)
	require.Equal(t, http.StatusPreconditionRequired, r.status)
	r = b.admin(t, http.MethodPut, "/v1/admin/models/org/big", keyOps, `{"rpm":60,"tpm":9000,"fallbacks":["org/none"]}`, "If-Match", `"1"`)
	require.Equal(t, http.StatusBadRequest, r.status, string(r.body))
	require.Equal(t, "fallbacks[0]", r.apiError(t).Field)
	r = b.admin(t, http.MethodPut, "/v1/admin/models/org/big", keyOps, `{"rpm":60,"tpm":9000,"fallbacks":["org/small"]}`, "If-Match", `"1"`)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	require.Equal(t, `"2"`, r.header.Get("ETag"))
	require.Equal(t, http.StatusPreconditionFailed,
		b.admin(t, http.MethodPut, "/v1/admin/models/org/big", keyOps, `{"tpm":1}`, "If-Match", `"1"`).status)
	var got api.AdminModel
	require.NoError(t, json.Unmarshal(b.admin(t, http.MethodGet, "/v1/admin/models/org/big", keyOps, "").body, &got))
	require.Equal(t, llmq.Model{RPM: 60, TPM: 9000, Fallbacks: []string{"org/small"}}, got.Model, "a PUT replaces every setting")

	r = b.admin(t, http.MethodDelete, "/v1/admin/models/org/small", keyOps, "", "If-Match", `"1"`)
	require.Equal(t, http.StatusConflict, r.status, string(r.body))
	require.Contains(t, r.apiError(t).Message, `models.org/big.fallbacks[0]: "org/small" is not in models`)
	require.Equal(t, http.StatusNoContent, b.admin(t, http.MethodDelete, "/v1/admin/models/org/big", keyOps, "", "If-Match", `"2"`).status)
	require.Eventually(t, func() bool { _, ok := w.Snapshot().Models["org/big"]; return !ok }, 5*time.Second, time.Millisecond)
	require.Equal(t, http.StatusBadRequest, b.post(t, keyAcme, `{"body":{"model":"org/big",`+msgs+`}}`).status, "deleted: refused")

	var list struct{ Data []api.AdminModel }
	require.NoError(t, json.Unmarshal(b.admin(t, http.MethodGet, "/v1/admin/models", keyOps, "").body, &list))
	require.Len(t, list.Data, 1)
	var audit struct{ Data []api.AdminAuditEntry }
	require.NoError(t, json.Unmarshal(b.admin(t, http.MethodGet, "/v1/admin/audit?limit=2", keyOps, "").body, &audit))
	require.Equal(t, "delete", audit.Data[0].Action)
	require.Equal(t, "model", audit.Data[0].Kind)
	require.Equal(t, "org/big", audit.Data[0].Name)
	require.Equal(t, "update", audit.Data[1].Action)
	require.JSONEq(t, `{"rpm":60,"tpm":6000,"concurrency":4,"fallbacks":["org/small"]}`, string(audit.Data[1].Old))
	require.Contains(t, audit.Data[1].Actor, "operator")
}
