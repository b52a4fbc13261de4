package tenancy_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/tenancy"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

// flaky is a real store's tenancy whose loads fail while down is set: the
// database briefly away.
type flaky struct {
	*store.Tenancy
	down atomic.Bool
}

func (f *flaky) Load(ctx context.Context) (*store.TenancyRows, error) {
	if f.down.Load() {
		return nil, errors.New("connection refused")
	}
	return f.Tenancy.Load(ctx)
}

// run runs w until the test ends.
func run(t *testing.T, w *tenancy.Watcher) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// TestWatcherKeepsTheLastGoodSnapshot: while the database is away, the
// watcher serves what it last loaded (a key stays accepted, a tenant's
// limits stay), and the periodic reload picks up the changes made
// meanwhile once it is back, without a notification.
func TestWatcherKeepsTheLastGoodSnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tc := store.New(storetest.NewPool(t)).Tenancy()
	h := sha256.Sum256([]byte("key"))
	_, err := tc.Import(ctx, llmq.Tenants{"a": {Scope: llmq.Scope{TPM: 100}}}, []store.ImportKey{{Name: "k", Tenant: "a", Hash: h[:]}})
	require.NoError(t, err)
	src := &flaky{Tenancy: tc}
	clk := clockwork.NewFakeClock()
	loads := make(chan *tenancy.Snapshot, 16)
	w := tenancy.New(src, tenancy.Config{Period: time.Minute, Clock: clk, Logger: quiet,
		OnLoad: func(s *tenancy.Snapshot) { loads <- s }})
	require.NoError(t, w.Load(ctx))
	<-loads
	require.InDelta(t, 100, w.Tenants()["a"].TPM, 0)

	src.down.Store(true)
	require.Error(t, w.Load(ctx))
	require.EqualValues(t, 1, w.Failures())
	k, ok := w.Snapshot().Key(h, time.Now())
	require.True(t, ok, "the last good snapshot is served")
	require.Equal(t, "a", k.Tenant)

	// Changed while this replica cannot read: the notification's reload
	// fails too, so the period's reload is the one that brings it.
	_, err = tc.UpdateTenant(ctx, "ops", store.TenantRow{Name: "a", Scope: llmq.Scope{TPM: 200}}, 0)
	require.NoError(t, err)
	src.down.Store(false)
	run(t, w)
	// The first reload (on listening) brings it at once; then a change
	// missed by the listener is brought by the period.
	require.Eventually(t, func() bool { return w.Tenants()["a"].TPM == 200 }, 5*time.Second, time.Millisecond)
	src.down.Store(true)
	_, err = tc.RevokeKey(ctx, "ops", "k", 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return w.Failures() >= 2 }, 5*time.Second, time.Millisecond, "the notification's reload fails")
	_, ok = w.Snapshot().Key(h, time.Now())
	require.True(t, ok, "still the last good snapshot")
	src.down.Store(false)
	require.NoError(t, clk.BlockUntilContext(ctx, 1))
	clk.Advance(time.Minute)
	require.Eventually(t, func() bool {
		_, ok := w.Snapshot().Key(h, time.Now())
		return !ok
	}, 5*time.Second, time.Millisecond, "the periodic reload brings the revocation")
}

// TestSnapshotKeys: a revoked key is left out; an expired one is refused
// from its expiry on.
func TestSnapshotKeys(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	later := now.Add(time.Hour)
	h1, h2, h3 := sha256.Sum256([]byte("1")), sha256.Sum256([]byte("2")), sha256.Sum256([]byte("3"))
	s := tenancy.Build(&store.TenancyRows{Keys: []store.APIKeyRow{
		{Name: "live", Tenant: "a", Hash: h1[:]},
		{Name: "revoked", Tenant: "a", Hash: h2[:], RevokedAt: &now},
		{Name: "expiring", Tenant: "b", Hash: h3[:], ExpiresAt: &later},
	}}, now)
	_, ok := s.Key(h1, now)
	require.True(t, ok)
	_, ok = s.Key(h2, now)
	require.False(t, ok)
	k, ok := s.Key(h3, later.Add(-time.Nanosecond))
	require.True(t, ok)
	require.Equal(t, tenancy.Key{Name: "expiring", Tenant: "b", ExpiresAt: later}, k)
	_, ok = s.Key(h3, later)
	require.False(t, ok)
}
