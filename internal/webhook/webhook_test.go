package webhook_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/llmq/llmq/internal/webhook"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 24)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

func sender(t *testing.T, srv *httptest.Server, cfg webhook.Config) *webhook.Sender {
	t.Helper()
	cfg.TLS = srv.Client().Transport.(*http.Transport).TLSClientConfig
	s, err := webhook.New(cfg)
	require.NoError(t, err)
	t.Cleanup(s.CloseIdleConnections)
	return s
}

// TestSendSigned: a delivery carries the Standard Webhooks headers, and
// the specification's own verifier accepts it with either of the
// tenant's two secrets (rotation) and refuses it with another.
func TestSendSigned(t *testing.T) {
	t.Parallel()
	oldSecret, newSecret2, other := newSecret(t), newSecret(t), newSecret(t)
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
	s := sender(t, srv, webhook.Config{Secrets: map[string][]string{"acme": {oldSecret, newSecret2}}, AllowPrivate: true})
	payload := []byte(`{"event_id":"e1"}`)
	require.NoError(t, s.Send(context.Background(), "acme", srv.URL+"/hook", "e1", time.Now(), payload))
	r := <-reqs
	require.Equal(t, payload, r.body)
	require.Equal(t, "e1", r.h.Get("webhook-id"))
	require.Equal(t, "application/json", r.h.Get("Content-Type"))
	for _, sec := range []string{oldSecret, newSecret2} {
		wh, err := standardwebhooks.NewWebhook(sec)
		require.NoError(t, err)
		require.NoError(t, wh.Verify(r.body, r.h))
	}
	wh, err := standardwebhooks.NewWebhook(other)
	require.NoError(t, err)
	require.ErrorIs(t, wh.Verify(r.body, r.h), standardwebhooks.ErrNoMatchingSignature)
	wh, err = standardwebhooks.NewWebhook(oldSecret)
	require.NoError(t, err)
	require.Error(t, wh.Verify([]byte(`{"event_id":"e2"}`), r.h), "a changed body fails")

	require.ErrorIs(t, s.Send(context.Background(), "nobody", srv.URL, "e3", time.Now(), payload), webhook.ErrNoSecret)
}

// TestRefusesPrivateAddresses: without AllowPrivate a webhook on a
// loopback address is refused at dial time; nothing reaches it.
func TestRefusesPrivateAddresses(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	s := sender(t, srv, webhook.Config{Secrets: map[string][]string{webhook.AnyTenant: {newSecret(t)}}})
	err := s.Send(context.Background(), "acme", srv.URL, "e1", time.Now(), []byte(`{}`))
	require.ErrorIs(t, err, webhook.ErrRefusedAddress)
	for _, u := range []string{"https://localhost:1/x", "https://10.0.0.1:1/x", "https://169.254.169.254/latest", "https://[::1]:1/"} {
		require.ErrorIs(t, s.Send(context.Background(), "acme", u, "e1", time.Now(), []byte(`{}`)), webhook.ErrRefusedAddress, u)
	}
	require.Zero(t, hits.Load())
}

// TestNoRedirects: a webhook answering with a redirect is not followed:
// the delivery fails and the redirect's target gets nothing.
func TestNoRedirects(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	target := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer target.Close()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL, http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	s := sender(t, srv, webhook.Config{Secrets: map[string][]string{webhook.AnyTenant: {newSecret(t)}}, AllowPrivate: true})
	err := s.Send(context.Background(), "acme", srv.URL, "e1", time.Now(), []byte(`{}`))
	require.ErrorContains(t, err, "307")
	require.Zero(t, hits.Load())
}
