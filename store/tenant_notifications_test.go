package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
)

// TestTenantNotificationsImportOnce: the first import writes the
// configuration's tenant routes and secrets ("*" included); a second
// one, even after every row was deleted, writes nothing.
func TestTenantNotificationsImportOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tn := store.NewTenantNotifications(store.New(storetest.NewPool(t)))
	done, err := tn.Import(ctx, map[string]llmq.Reply{"acme": {To: "acme-results", Webhook: "https://acme.example/hook"}},
		map[string][]string{"acme": {"whsec_a", "whsec_b"}, "*": {"whsec_any"}})
	require.NoError(t, err)
	require.True(t, done)
	rows, err := tn.List(ctx)
	require.NoError(t, err)
	require.Len(t, rows, 2)
	require.Equal(t, "*", rows[0].Tenant)
	require.Equal(t, []string{"whsec_any"}, rows[0].Secrets)
	require.Equal(t, llmq.Reply{To: "acme-results", Webhook: "https://acme.example/hook"}, rows[1].Reply())
	require.Equal(t, []string{"whsec_a", "whsec_b"}, rows[1].Secrets)

	require.NoError(t, tn.Delete(ctx, "ops", "acme", 0))
	done, err = tn.Import(ctx, map[string]llmq.Reply{"other": {To: "x"}}, nil)
	require.NoError(t, err)
	require.False(t, done)
	_, err = tn.Get(ctx, "other")
	require.ErrorIs(t, err, store.ErrTenancyNotFound)
}

// TestTenantNotificationsVersionsAndRotation: a route is created once
// (ErrTenancyExists after), changed only on the version read, and a
// rotation keeps the newest two secrets, newest first; the audit log
// shows secrets by fingerprint only.
func TestTenantNotificationsVersionsAndRotation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := store.New(storetest.NewPool(t))
	tn := store.NewTenantNotifications(st)
	_, err := tn.PutRoute(ctx, "ops", "acme", llmq.Reply{To: "q"}, 3)
	require.ErrorIs(t, err, store.ErrTenancyNotFound)
	row, err := tn.PutRoute(ctx, "ops", "acme", llmq.Reply{To: "q"}, 0)
	require.NoError(t, err)
	require.Equal(t, int64(1), row.Version)
	_, err = tn.PutRoute(ctx, "ops", "acme", llmq.Reply{To: "q2"}, 0)
	require.ErrorIs(t, err, store.ErrTenancyExists)
	_, err = tn.PutRoute(ctx, "ops", "acme", llmq.Reply{To: "q2"}, 7)
	require.ErrorIs(t, err, store.ErrVersionMismatch)
	row, err = tn.PutRoute(ctx, "ops", "acme", llmq.Reply{To: "q2", Webhook: "https://a.example"}, 1)
	require.NoError(t, err)
	require.Equal(t, int64(2), row.Version)
	require.Equal(t, "q2", row.ReplyTo)

	for _, s := range []string{"whsec_1", "whsec_2", "whsec_3"} {
		row, err = tn.RotateSecret(ctx, "ops", "acme", s)
		require.NoError(t, err)
	}
	require.Equal(t, []string{"whsec_3", "whsec_2"}, row.Secrets)
	require.Equal(t, "q2", row.ReplyTo, "a rotation keeps the route")
	row, err = tn.EndRotation(ctx, "ops", "acme")
	require.NoError(t, err)
	require.Equal(t, []string{"whsec_3"}, row.Secrets)
	_, err = tn.EndRotation(ctx, "ops", "nobody")
	require.ErrorIs(t, err, store.ErrTenancyNotFound)

	require.ErrorIs(t, tn.Delete(ctx, "ops", "acme", 1), store.ErrVersionMismatch)
	require.NoError(t, tn.Delete(ctx, "ops", "acme", row.Version))
	_, err = tn.Get(ctx, "acme")
	require.ErrorIs(t, err, store.ErrTenancyNotFound)

	audit, err := st.Tenancy().Audit(ctx, 0, 100)
	require.NoError(t, err)
	require.Len(t, audit, 7)
	for _, e := range audit {
		require.Equal(t, "tenant_notifications", e.Kind)
		require.NotContains(t, string(e.Old)+string(e.New), "whsec_")
	}
}

// TestTenantNotificationsListen: a change is announced on
// TenantNotificationsChannel.
func TestTenantNotificationsListen(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tn := store.NewTenantNotifications(store.New(storetest.NewPool(t)))
	listening, changed, done := make(chan struct{}), make(chan struct{}, 1), make(chan error, 1)
	go func() {
		done <- tn.Listen(ctx, func() { close(listening) }, func() {
			select {
			case changed <- struct{}{}:
			default:
			}
		})
	}()
	<-listening
	_, err := tn.RotateSecret(ctx, "ops", "acme", "whsec_x")
	require.NoError(t, err)
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no notification of the change")
	}
	cancel()
	<-done
}
