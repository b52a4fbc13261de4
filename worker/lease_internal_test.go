package worker

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/store"
)

// renewerFunc is a leaseRenewer made of a function.
type renewerFunc func(ctx context.Context, owner string, lease time.Duration, held []store.Lease) ([]store.Lease, error)

func (f renewerFunc) Heartbeat(ctx context.Context, owner string, lease time.Duration, held []store.Lease) ([]store.Lease, error) {
	return f(ctx, owner, lease, held)
}

// heldJob returns a job holding the lease of id.
func heldJob(id string) *job {
	p := &job{lease: store.Lease{Key: store.Key{Tenant: "t", ID: id}, Token: 1}}
	p.ctx, p.cancel = context.WithCancelCause(context.Background())
	return p
}

func newTestHeartbeat(t *testing.T, st leaseRenewer, clock clockwork.Clock) *heartbeat {
	t.Helper()
	h, err := newHeartbeat(heartbeatConfig{Store: st, Owner: "w1", Lease: 3 * time.Second, Clock: clock,
		Log: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	return h
}

// TestHeartbeatRenew: a renewal sends every lease held, with the owner and
// the lease; the jobs it did not renew lose theirs, except a job
// registered while it was under way; an unregistered job is not sent.
func TestHeartbeatRenew(t *testing.T) {
	t.Parallel()
	a, b, gone, late := heldJob("a"), heldJob("b"), heldJob("gone"), heldJob("late")
	var h *heartbeat
	var sent []store.Lease
	h = newTestHeartbeat(t, renewerFunc(func(_ context.Context, owner string, lease time.Duration, held []store.Lease) ([]store.Lease, error) {
		require.Equal(t, "w1", owner)
		require.Equal(t, 3*time.Second, lease)
		sent = held
		h.register(late)
		return []store.Lease{a.lease}, nil
	}), clockwork.NewFakeClock())
	for _, p := range []*job{a, b, gone} {
		h.register(p)
	}
	h.unregister(gone)
	require.True(t, h.renew(context.Background()))
	require.ElementsMatch(t, []store.Lease{a.lease, b.lease}, sent)
	require.NoError(t, a.ctx.Err())
	require.ErrorIs(t, context.Cause(b.ctx), errLeaseLost)
	require.NoError(t, gone.ctx.Err(), "an unregistered job is not the heartbeat's")
	require.NoError(t, late.ctx.Err(), "registered after the renewal began")
}

// TestHeartbeatFailing: a renewal that fails cancels nothing until the
// leases have expired (Lease since the last renewal); then every job held
// loses its lease.
func TestHeartbeatFailing(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	calls := make(chan struct{})
	h := newTestHeartbeat(t, renewerFunc(func(context.Context, string, time.Duration, []store.Lease) ([]store.Lease, error) {
		calls <- struct{}{}
		return nil, errors.New("database down")
	}), clock)
	p := heldJob("a")
	h.register(p)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.Run(ctx); close(done) }()
	for range 2 { // 1 s, 2 s: under the lease
		require.NoError(t, clock.BlockUntilContext(ctx, 1))
		clock.Advance(time.Second)
		<-calls
	}
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	require.NoError(t, p.ctx.Err())
	clock.Advance(time.Second) // 3 s: the lease is over
	<-calls
	select {
	case <-p.ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the job kept its lease")
	}
	require.ErrorIs(t, context.Cause(p.ctx), errLeaseLost)
	cancel()
	<-done
}

func TestHeartbeatConfig(t *testing.T) {
	t.Parallel()
	st := renewerFunc(nil)
	h, err := newHeartbeat(heartbeatConfig{Store: st, Owner: "w1"})
	require.NoError(t, err)
	require.Equal(t, LeaseDefault, h.cfg.Lease)
	require.Equal(t, LeaseDefault/3, h.cfg.Interval)
	_, err = newHeartbeat(heartbeatConfig{Store: st, Owner: "w1", Lease: time.Second, Interval: time.Second})
	require.ErrorContains(t, err, "must be shorter than Lease")
	_, err = newHeartbeat(heartbeatConfig{Owner: "w1"})
	require.ErrorContains(t, err, "required")
}
