package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// TestNotificationsLsAndReplay: ls lists a dead result event, replay makes
// it due again with the same event id, and leaves the job as it was;
// replay --dead does so for every dead event of a tenant.
func TestNotificationsLsAndReplay(t *testing.T) {
	b := setupCLI(t)
	b.job(t, "acme", "n1")
	_, err := b.store.Pool().Exec(b.ctx, `UPDATE jobs SET reply = '{"to":"replies"}' WHERE tenant = 'acme' AND id = 'n1'`)
	require.NoError(t, err)
	_, err = b.store.Queue().StoreResult(b.ctx, store.Key{Tenant: "acme", ID: "n1"}, store.Result{Response: []byte(`{}`), UsedModel: "m"})
	require.NoError(t, err)
	ns := b.store.Notifications()
	claimed, err := ns.Claim(b.ctx, time.Now().Add(time.Minute), time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	ev := claimed[0].EventID
	require.NoError(t, ns.Settle(b.ctx, claimed, map[string]store.Failure{ev: {At: time.Now(), Error: "no route", Dead: true}}))

	var out strings.Builder
	require.Equal(t, 0, execute(context.Background(), []string{"notifications", "ls", "--state", "dead", "--json"}, nil, &out, &out), out.String())
	var list struct {
		Data []struct {
			EventID    string `json:"event_id"`
			State      string `json:"state"`
			DeadReason string `json:"dead_reason"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(out.String()), &list), out.String())
	require.Len(t, list.Data, 1)
	require.Equal(t, ev, list.Data[0].EventID)
	require.Equal(t, "dead", list.Data[0].State)
	require.Equal(t, store.NotificationUndeliverable, list.Data[0].DeadReason)

	out.Reset()
	require.NotEqual(t, 0, execute(context.Background(), []string{"notifications", "replay", "--tenant", "globex", ev}, nil, &out, &out),
		"another tenant's event is not found")
	require.Contains(t, out.String(), "notification not found")
	out.Reset()
	require.Equal(t, 0, execute(context.Background(), []string{"notifications", "replay", "--tenant", "acme", ev}, nil, &out, &out), out.String())
	require.Equal(t, "replayed: "+ev+"\n", out.String())
	pending, err := ns.List(b.ctx, store.NotificationFilter{State: store.NotificationPending})
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.Equal(t, ev, pending[0].EventID)
	rec, err := b.store.Jobs().Get(b.ctx, "acme", "n1")
	require.NoError(t, err)
	require.Equal(t, llmq.StatusSucceeded, rec.Status, "the job is not touched")

	// Dead again, then replayed with every dead event of its tenant.
	claimed, err = ns.Claim(b.ctx, time.Now().Add(time.Minute), time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.NoError(t, ns.Settle(b.ctx, claimed, map[string]store.Failure{ev: {At: time.Now(), Error: "no route", Dead: true}}))
	for _, bad := range [][]string{{"notifications", "replay"}, {"notifications", "replay", "--dead", ev},
		{"notifications", "replay", "--job", "n1", ev}} {
		out.Reset()
		require.NotEqual(t, 0, execute(context.Background(), bad, nil, &out, &out), "%v", bad)
	}
	out.Reset()
	require.Equal(t, 0, execute(context.Background(), []string{"notifications", "replay", "--dead", "--tenant", "globex"}, nil, &out, &out), out.String())
	require.Equal(t, "replayed: 0 dead\n", out.String())
	out.Reset()
	require.Equal(t, 0, execute(context.Background(), []string{"notifications", "replay", "--dead", "--tenant", "acme", "--job", "n1"}, nil, &out, &out), out.String())
	require.Equal(t, "replayed: 1 dead\n", out.String())
	pending, err = ns.List(b.ctx, store.NotificationFilter{State: store.NotificationPending})
	require.NoError(t, err)
	require.Len(t, pending, 1)
}
