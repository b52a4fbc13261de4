package app_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/app"
)

// TestFirstStartImportsTheConfiguration: the first start with the
// configuration of today imports its tenants and keys (the key works);
// a later start whose configuration says otherwise changes nothing: the
// database wins.
func TestFirstStartImportsTheConfiguration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := settings(t)
	s.Tenants = llmq.Tenants{"acme": {Scope: llmq.Scope{TPM: 4000}}}
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
	require.NoError(t, a.Stop(ctx))

	s.Tenants = llmq.Tenants{"acme": {Scope: llmq.Scope{TPM: 9}}, "globex": {}}
	s.APIKeys = map[string]string{"key-globex": "globex"}
	b := start()
	t.Cleanup(func() { _ = b.Stop(ctx) })
	require.Equal(t, http.StatusOK, status(b, "key-acme"), "the database's key")
	require.Equal(t, http.StatusUnauthorized, status(b, "key-globex"), "not imported again")
	rows, err = b.Store().Tenancy().Load(ctx)
	require.NoError(t, err)
	require.Equal(t, llmq.Tenants{"acme": {Scope: llmq.Scope{TPM: 4000}}}, rows.AsTenants())
}
