package tenantroutes_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/tenantroutes"
	"github.com/llmq/llmq/internal/webhook"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 24)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// TestRoutesLive: a tenant's route and secrets changed in the database
// reach a running Routes and its webhook sender without a restart: the
// route the worker reads, both signatures while a rotation lasts, then
// the new secret's alone.
func TestRoutesLive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tn := store.NewTenantNotifications(store.New(storetest.NewPool(t)))
	first := newSecret(t)
	_, err := tn.Import(ctx, map[string]llmq.Reply{"acme": {To: "acme-results"}}, map[string][]string{"acme": {first}})
	require.NoError(t, err)

	type got struct {
		body []byte
		h    http.Header
	}
	reqs := make(chan got, 1)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		reqs <- got{b, r.Header.Clone()}
	}))
	defer srv.Close()
	hooks, err := webhook.New(webhook.Config{AllowPrivate: true, TLS: srv.Client().Transport.(*http.Transport).TLSClientConfig})
	require.NoError(t, err)
	defer hooks.CloseIdleConnections()
	loaded := make(chan struct{}, 16)
	routes, err := tenantroutes.New(tenantroutes.Config{Source: tn, OnSecrets: func(s map[string][]string) error {
		defer func() { loaded <- struct{}{} }()
		return hooks.SetSecrets(s)
	}})
	require.NoError(t, err)
	require.NoError(t, routes.Start(ctx))
	defer func() { require.NoError(t, routes.Stop(ctx)) }()
	// until waits, at most 10 s, for cond to hold after the loads (each
	// change announces itself). A load signals from OnSecrets, before it
	// stores the routes: cond is read again every 10 ms too, so a load
	// signalled before its routes were stored is not waited past.
	until := func(cond func() bool) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		recheck := time.NewTicker(10 * time.Millisecond)
		defer recheck.Stop()
		for !cond() {
			select {
			case <-loaded:
			case <-recheck.C:
			case <-deadline:
				t.Fatal("the change did not arrive")
			}
		}
	}
	verify := func(secret string) error {
		t.Helper()
		require.NoError(t, hooks.Send(ctx, "acme", srv.URL, "e1", time.Now(), []byte(`{}`)))
		r := <-reqs
		wh, err := standardwebhooks.NewWebhook(secret)
		require.NoError(t, err)
		return wh.Verify(r.body, r.h)
	}

	r, ok := routes.TenantReply("acme")
	require.True(t, ok)
	require.Equal(t, "acme-results", r.To)
	require.NoError(t, verify(first))
	_, ok = routes.TenantReply("globex")
	require.False(t, ok)

	_, err = tn.PutRoute(ctx, "ops", "acme", llmq.Reply{To: "acme-2", Webhook: "https://acme.example/h"}, 1)
	require.NoError(t, err)
	second := newSecret(t)
	_, err = tn.RotateSecret(ctx, "ops", "acme", second)
	require.NoError(t, err)
	until(func() bool { r, _ := routes.TenantReply("acme"); return r.To == "acme-2" })
	until(func() bool { return verify(second) == nil })
	require.NoError(t, verify(first), "both sign while the rotation lasts")

	_, err = tn.EndRotation(ctx, "ops", "acme")
	require.NoError(t, err)
	until(func() bool { return verify(first) != nil })
	require.NoError(t, verify(second))
}
