package console_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/app/console"
)

// TestConsoleReplicas: two consoles behind one address, the requests
// taking turns: with the same secret, a session signed in at one is the
// other's too; with a random secret each (none configured), signing in
// fails (docs/design/scale.md).
func TestConsoleReplicas(t *testing.T) {
	t.Parallel()
	b := setup(t)
	serve := func(secret string) *browser {
		var uis [2]http.Handler
		for i := range uis {
			ui, err := console.New(console.Config{API: b.api, Logger: quiet, Clock: b.clock, Secret: secret})
			require.NoError(t, err)
			uis[i] = ui
		}
		var turn atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, console.Prefix) {
				uis[turn.Add(1)%2].ServeHTTP(w, r)
				return
			}
			b.api.ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		return (&bundle{store: b.store, clock: b.clock, srv: srv, api: b.api}).browser(t)
	}
	shared := serve(strings.Repeat("s", console.SecretMinBytes))
	require.Equal(t, http.StatusSeeOther, shared.signIn(keyAcme).status)
	for range 4 {
		require.Equal(t, http.StatusOK, shared.get("/ui/jobs").status)
	}

	// A random secret each: the sign-in form's CSRF token, signed by one
	// replica, is refused by the other, which answers its post.
	own := serve("")
	require.Equal(t, http.StatusForbidden, own.signIn(keyAcme).status)
}
