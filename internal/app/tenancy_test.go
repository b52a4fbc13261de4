package app_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/app"
)

// TestFirstStartImportsTheConfiguration: the first start with the
// configuration of today imports its tenants, keys and models (the key
// works); a later start whose configuration says otherwise changes
// nothing: the database wins (its models are the catalog).
func TestFirstStartImportsTheConfiguration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := settings(t)
	s.Tenants = llmq.Tenants{"acme": {Scope: llmq.Scope{TPM: 4000}}}
	s.Models = map[string]llmq.Model{"m1": {RPM: 60}}
	post := func(a *app.App, model string) int {
		body := `{"body":{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}}`
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+a.APIAddr().String()+"/v1/jobs", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer key-acme")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	status := func(a *app.App, key string) int {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.APIAddr().String()+"/v1/me", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	start := func() *app.App {
		a, err := app.New(ctx, app.Config{Settings: s, Migrate: true, Logger: quiet, API: &app.APIConfig{Listen: "127.0.0.1:0"}})
		require.NoError(t, err)
		require.NoError(t, a.Start(ctx))
		return a
	}
	a := start()
	require.Equal(t, http.StatusOK, status(a, "key-acme"))
	rows, err := a.Store().Tenancy().Load(ctx)
	require.NoError(t, err)
	require.Equal(t, llmq.Tenants{"acme": {Scope: llmq.Scope{TPM: 4000}}}, rows.AsTenants())
	require.Len(t, rows.Keys, 1)
	require.NotContains(t, string(rows.Keys[0].Hash), "key-acme")
	require.Equal(t, map[string]llmq.Model{"m1": {RPM: 60}}, rows.ModelMap())
	require.NoError(t, a.Stop(ctx))

	s.Models = map[string]llmq.Model{"m2": {RPM: 1}}
	s.Tenants = llmq.Tenants{"acme": {Scope: llmq.Scope{TPM: 9}}, "globex": {}}
	s.APIKeys = map[string]string{"key-globex": "globex"}
	b := start()
	t.Cleanup(func() { _ = b.Stop(ctx) })
	require.Equal(t, http.StatusOK, status(b, "key-acme"), "the database's key")
	require.Equal(t, http.StatusUnauthorized, status(b, "key-globex"), "not imported again")
	rows, err = b.Store().Tenancy().Load(ctx)
	require.NoError(t, err)
	require.Equal(t, llmq.Tenants{"acme": {Scope: llmq.Scope{TPM: 4000}}}, rows.AsTenants())
	require.Equal(t, map[string]llmq.Model{"m1": {RPM: 60}}, rows.ModelMap())
	require.Equal(t, http.StatusAccepted, post(b, "m1"), "the database's model")
	require.Equal(t, http.StatusBadRequest, post(b, "m2"), "the file's models are not read again")
}
