package store_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
)

// shareOf is replica's share from the ledger rows of key, as a worker
// computes it.
func shareOf(rows []store.LedgerEntry, key, replica string) float64 {
	var rs []shaping.Replica
	for _, r := range rows {
		if r.Key == key {
			rs = append(rs, shaping.Replica{Demand: r.Demand, Share: r.Share, Self: r.Replica == replica})
		}
	}
	return shaping.ReplicaShare(rs, shaping.ShareFloorDefault)
}

func TestLedgerReplicasShare(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const key, other = "https://api.example/v1 k:0123 gpt-4o", "https://api.example/v1 k:0123 gpt-4.1"
	lease := 3 * time.Second
	renew := func(replica string, demand, share float64) []store.LedgerEntry {
		t.Helper()
		rows, err := b.store.Ledger().RenewQuotas(b.ctx, replica, lease, []store.QuotaClaim{{Key: key, Demand: demand, Share: share}})
		require.NoError(t, err)
		return rows
	}

	// a is alone: the whole quota.
	rows := renew("a", 10, 1)
	require.Equal(t, []store.LedgerEntry{{Key: key, Replica: "a", Demand: 10, Share: 1, LeaseUntil: b.clock.Now().Add(lease)}}, rows)
	require.Equal(t, 1.0, shareOf(rows, key, "a"))

	// b joins: it starts on the floor while a still runs on everything,
	// a lowers to half at its next renewal, then b takes the other half.
	rows = renew("b", 10, shaping.ShareFloorDefault)
	require.Len(t, rows, 2)
	require.Equal(t, shaping.ShareFloorDefault, shareOf(rows, key, "b"))
	rows = renew("a", 10, 1)
	require.Equal(t, 0.5, shareOf(rows, key, "a"))
	b.clock.Advance(500 * time.Millisecond)
	renew("a", 10, 0.5)
	rows = renew("b", 10, shaping.ShareFloorDefault)
	require.Equal(t, 0.5, shareOf(rows, key, "b"))
	renew("b", 10, 0.5)

	// Another key is another quota.
	rows, err := b.store.Ledger().RenewQuotas(b.ctx, "b", lease, []store.QuotaClaim{{Key: other, Demand: 1, Share: 1}})
	require.NoError(t, err)
	require.Len(t, rows, 1)

	// a dies: its row counts until its lease ends, then b has everything.
	b.clock.Advance(lease - time.Millisecond) // a renewed last at 0.5 s
	rows = renew("b", 10, 0.5)
	require.Len(t, rows, 2, "a's lease ends in a millisecond")
	require.Equal(t, 0.5, shareOf(rows, key, "b"))
	b.clock.Advance(time.Millisecond)
	rows = renew("b", 10, 0.5)
	require.Len(t, rows, 1)
	require.Equal(t, 1.0, shareOf(rows, key, "b"))

	// A minute later a's row is deleted; b leaving deletes b's rows.
	var n int
	require.NoError(t, b.store.Pool().QueryRow(b.ctx, `SELECT count(*) FROM quota_ledger WHERE replica = 'a'`).Scan(&n))
	require.Equal(t, 1, n)
	b.clock.Advance(store.LedgerGone + time.Millisecond)
	renew("b", 10, 1)
	require.NoError(t, b.store.Pool().QueryRow(b.ctx, `SELECT count(*) FROM quota_ledger WHERE replica = 'a'`).Scan(&n))
	require.Equal(t, 0, n)
	require.NoError(t, b.store.Ledger().LeaveQuotas(b.ctx, "b"))
	require.NoError(t, b.store.Pool().QueryRow(b.ctx, `SELECT count(*) FROM quota_ledger`).Scan(&n))
	require.Equal(t, 0, n)
}

func TestLedgerRenewValidates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []store.QuotaClaim{{Key: "", Demand: 1, Share: 1}, {Key: "k", Demand: -1, Share: 1}, {Key: "k", Demand: 1, Share: 0}, {Key: "k", Demand: 1, Share: 1.5},
		{Key: "k", Demand: 1, Share: 1, Provider: store.ProviderState{CreditTokens: -1}}} {
		_, err := b.store.Ledger().RenewQuotas(b.ctx, "a", time.Second, []store.QuotaClaim{c})
		require.Error(t, err, "%+v", c)
	}
	_, err := b.store.Ledger().RenewQuotas(b.ctx, "", time.Second, []store.QuotaClaim{{Key: "k", Demand: 1, Share: 1}})
	require.Error(t, err)
	rows, err := b.store.Ledger().RenewQuotas(b.ctx, "a", time.Second, nil)
	require.NoError(t, err)
	require.Empty(t, rows)
}

// TestLedgerProviderState: a replica's credit and the short bucket it
// learned go through the ledger to the others, and a renewal replaces them.
func TestLedgerProviderState(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const key = "https://api.example/v1 k:0123 gpt-4o"
	ps := store.ProviderState{CreditRequests: 12, CreditTokens: 3400.5, ShortRequests: 50, ShortTokens: 5000}
	_, err := b.store.Ledger().RenewQuotas(b.ctx, "a", time.Second, []store.QuotaClaim{{Key: key, Demand: 1, Share: 0.5, Provider: ps}})
	require.NoError(t, err)
	rows, err := b.store.Ledger().RenewQuotas(b.ctx, "b", time.Second, []store.QuotaClaim{{Key: key, Demand: 1, Share: 0.5}})
	require.NoError(t, err)
	require.Len(t, rows, 2)
	require.Equal(t, ps, rows[0].Provider)
	require.Equal(t, store.ProviderState{}, rows[1].Provider)
	ps = store.ProviderState{CreditTokens: 7}
	rows, err = b.store.Ledger().RenewQuotas(b.ctx, "a", time.Second, []store.QuotaClaim{{Key: key, Demand: 1, Share: 0.5, Provider: ps}})
	require.NoError(t, err)
	require.Equal(t, ps, rows[0].Provider)
}

// TestLedgerFirstRenewalsSeeEachOther: replicas that write their first
// rows of a key at once take turns, so each sees the rows of those before
// it, and none runs on the whole quota believing itself alone.
func TestLedgerFirstRenewalsSeeEachOther(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const key, replicas = "tenant:a", 8
	seen := make(chan int, replicas)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() {
			<-start
			rows, err := b.store.Ledger().RenewQuotas(b.ctx, fmt.Sprintf("r%d", i), time.Second,
				[]store.QuotaClaim{{Key: key, Demand: 1, Share: shaping.ShareFloorDefault}})
			assert.NoError(t, err)
			seen <- len(rows)
		})
	}
	close(start)
	wg.Wait()
	close(seen)
	var counts []int
	for n := range seen {
		counts = append(counts, n)
	}
	slices.Sort(counts)
	require.Equal(t, []int{1, 2, 3, 4, 5, 6, 7, 8}, counts, "the rows each first renewal saw")
}
