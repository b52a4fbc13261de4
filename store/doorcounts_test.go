package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/store"
)

// TestShareDoorCounts: a replica writes its counts and reads the other
// replicas' live ones, never its own; a row whose lease ended is not read,
// and one ended store.LedgerGone ago is deleted; bad counts are refused.
func TestShareDoorCounts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	lease := 3 * time.Second
	got, err := b.store.Ledger().ShareDoorCounts(b.ctx, "a", lease, []store.DoorCount{{Name: "key:k", Taken: 5, LastMinute: 4}})
	require.NoError(t, err)
	require.Empty(t, got, "its own rows are not read")
	got, err = b.store.Ledger().ShareDoorCounts(b.ctx, "b", lease, []store.DoorCount{{Name: "tenant:t", Taken: 2, LastMinute: 2}})
	require.NoError(t, err)
	require.Equal(t, []store.DoorCount{{Name: "key:k", Replica: "a", Taken: 5, LastMinute: 4}}, got)
	got, err = b.store.Ledger().ShareDoorCounts(b.ctx, "a", lease, []store.DoorCount{{Name: "key:k", Taken: 7, LastMinute: 6}})
	require.NoError(t, err)
	require.Equal(t, []store.DoorCount{{Name: "tenant:t", Replica: "b", Taken: 2, LastMinute: 2}}, got)

	// b stops renewing: past its lease a no longer reads it; a minute
	// later its row is gone.
	b.clock.Advance(lease + time.Millisecond)
	got, err = b.store.Ledger().ShareDoorCounts(b.ctx, "a", lease, nil)
	require.NoError(t, err)
	require.Empty(t, got)
	b.clock.Advance(store.LedgerGone)
	_, err = b.store.Ledger().ShareDoorCounts(b.ctx, "a", lease, []store.DoorCount{{Name: "key:k", Taken: 7, LastMinute: 0}})
	require.NoError(t, err)
	var rows int
	require.NoError(t, b.store.Pool().QueryRow(b.ctx, `SELECT count(*) FROM door_counts WHERE replica = 'b'`).Scan(&rows))
	require.Zero(t, rows)

	_, err = b.store.Ledger().ShareDoorCounts(b.ctx, "a", lease, []store.DoorCount{{Name: "", Taken: 1}})
	require.ErrorContains(t, err, "a name")
	_, err = b.store.Ledger().ShareDoorCounts(b.ctx, "", lease, nil)
	require.ErrorContains(t, err, "a replica")
}
