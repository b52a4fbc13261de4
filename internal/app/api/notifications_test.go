package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// TestReplayDeadNotifications: POST /v1/notifications/replay makes due
// again the dead result events in the key's scope, of one job when the
// body names it, and leaves other tenants' events dead.
func TestReplayDeadNotifications(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	ctx := context.Background()
	for _, k := range []store.Key{{Tenant: "acme", ID: "a1"}, {Tenant: "acme", ID: "a2"}, {Tenant: "globex", ID: "g1"}} {
		j, err := llmq.Decode([]byte(jobJSON(k.ID)), llmq.DecodeOptions{})
		require.NoError(t, err)
		j.Tenant, j.ReplyTo = k.Tenant, &llmq.Reply{Webhook: "https://hooks.example.com/llmq"}
		_, err = b.store.Jobs().Insert(ctx, j)
		require.NoError(t, err)
		_, err = b.store.Queue().StoreResult(ctx, k, store.Result{Response: []byte(`{"id":"x"}`), UsedModel: "gpt-4o-mini"})
		require.NoError(t, err)
	}
	ns := b.store.Notifications()
	claimed, err := ns.Claim(ctx, time.Now().Add(time.Minute), time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, claimed, 3)
	dead := map[string]store.Failure{}
	for _, n := range claimed {
		dead[n.EventID] = store.Failure{At: time.Now(), Error: "gone", Dead: true}
	}
	require.NoError(t, ns.Settle(ctx, claimed, dead))
	deadOf := func(tenant string) int {
		list, err := ns.List(ctx, store.NotificationFilter{Tenant: tenant, State: store.NotificationDead})
		require.NoError(t, err)
		return len(list)
	}

	replay := func(key, body string) int64 {
		r := b.do(t, http.MethodPost, "/v1/notifications/replay", key, "application/json", []byte(body))
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		return int64(r.json(t)["replayed"].(float64))
	}
	require.Equal(t, int64(1), replay(keyAcme, `{"job_id":"a2"}`))
	require.Equal(t, 1, deadOf("acme"))
	require.Equal(t, int64(1), replay(keyAcme, `{}`))
	require.Equal(t, 0, deadOf("acme"))
	require.Equal(t, 1, deadOf("globex"), "acme's key replays acme's events only")
	require.Equal(t, int64(0), replay(keyAcme, `{}`))
	require.Equal(t, int64(1), replay(keyOps, `{}`))
	require.Equal(t, 0, deadOf(""))

	r := b.do(t, http.MethodPost, "/v1/notifications/replay", keyAcme, "application/json", []byte(`{"job_id":"a b"}`))
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Equal(t, "job_id", r.apiError(t).Field)
}
