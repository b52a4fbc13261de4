package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/store"
)

// TestJobRates counts the jobs recorded and finished per minute, exactly,
// on the minutes the fake clock says, for one tenant or all of them.
func TestJobRates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	t0 := b.clock.Now() // 12:00:00
	insert := func(tenant, id string) {
		t.Helper()
		j := newJob(t, id)
		j.Tenant = tenant
		_, err := b.store.Jobs().Insert(b.ctx, j)
		require.NoError(t, err)
	}
	succeed := func(tenant, id string) {
		t.Helper()
		stored, err := b.store.Queue().StoreResult(b.ctx, store.Key{Tenant: tenant, ID: id},
			store.Result{Response: []byte(`{}`), UsedModel: "big"})
		require.NoError(t, err)
		require.True(t, stored)
	}

	b.clock.Advance(10 * time.Second) // 12:00:10
	insert("acme", "a1")
	insert("acme", "a2")
	insert("zen", "z1")
	b.clock.Advance(109 * time.Second) // 12:01:59
	insert("acme", "a3")
	succeed("acme", "a1")
	b.clock.Advance(time.Second) // 12:02:00
	_, err := b.store.Jobs().Cancel(b.ctx, "acme", "a2")
	require.NoError(t, err)
	succeed("zen", "z1")
	b.clock.Advance(90 * time.Second)

	m := func(min, recorded, succeeded, other int64) store.JobMinute {
		return store.JobMinute{Minute: t0.Add(time.Duration(min) * time.Minute), Recorded: recorded,
			Succeeded: succeeded, OtherFinished: other}
	}
	got, err := b.store.Jobs().JobRates(b.ctx, "acme", t0)
	require.NoError(t, err)
	require.Equal(t, []store.JobMinute{m(0, 2, 0, 0), m(1, 1, 1, 0), m(2, 0, 0, 1)}, got)

	got, err = b.store.Jobs().JobRates(b.ctx, "", t0)
	require.NoError(t, err)
	require.Equal(t, []store.JobMinute{m(0, 3, 0, 0), m(1, 1, 1, 0), m(2, 0, 1, 1)}, got)

	got, err = b.store.Jobs().JobRates(b.ctx, "acme", t0.Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, []store.JobMinute{m(1, 1, 1, 0), m(2, 0, 0, 1)}, got)

	got, err = b.store.Jobs().JobRates(b.ctx, "nobody", t0)
	require.NoError(t, err)
	require.Empty(t, got)
}
