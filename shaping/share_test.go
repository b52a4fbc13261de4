package shaping

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReplicaShare(t *testing.T) {
	t.Parallel()
	me := func(demand, share float64) Replica { return Replica{Demand: demand, Share: share, Self: true} }
	other := func(demand, share float64) Replica { return Replica{Demand: demand, Share: share} }
	for _, tc := range []struct {
		name string
		rows []Replica
		want float64
	}{
		{"alone", []Replica{me(10, 1)}, 1},
		{"alone and idle", []Replica{me(0, 1)}, 1},
		{"no row of its own", nil, 1},
		{"three busy, settled", []Replica{me(5, 1.0/3), other(5, 1.0/3), other(5, 1.0/3)}, 1.0 / 3},
		{"demand-weighted", []Replica{me(30, 0.5), other(10, 0.26)}, 0.02 + 0.96*0.75},
		{"capped by what the other runs on", []Replica{me(30, 0.5), other(10, 0.5)}, 0.5},
		{"lowers at once", []Replica{me(10, 1), other(10, 0.02)}, 0.5},
		{"an idle replica keeps the floor", []Replica{me(0, 0.5), other(10, 0.5)}, 0.02},
		{"the busy one takes the idle ones' part", []Replica{me(10, 0.96), other(0, 0.02), other(0, 0.02)}, 0.96},
		{"the idle ones keep one floor together", []Replica{me(0, 0.02), other(0, 0.02), other(10, 0.96)}, 0.01},
		{"which the busy one takes", []Replica{me(10, 0.96), other(0, 0.01), other(0, 0.01)}, 0.98},
		{"a newcomer waits for the others to lower", []Replica{me(10, 0.02), other(10, 1)}, 0.02},
		{"then takes what they left", []Replica{me(10, 0.02), other(10, 0.5)}, 0.5},
		{"partly", []Replica{me(10, 0.02), other(10, 0.7)}, 0.3},
		{"nobody has demand: equal", []Replica{me(0, 0.02), other(0, 0.02), other(0, 0.02), other(0, 0.02)}, 0.25},
		{"a dead replica's part moves", []Replica{me(10, 0.5)}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.InDelta(t, tc.want, ReplicaShare(tc.rows, ShareFloorDefault), 1e-9)
		})
	}
	// Alone, whatever its demand, exactly 1: a lane whose share rounds to
	// 0.9999999999999999 (a demand of 7 did) paces every send of its
	// first burst at the RPM interval.
	for d := range 1000 {
		demand := float64(d) * 0.37
		require.Equal(t, 1.0, ReplicaShare([]Replica{me(demand, 1)}, ShareFloorDefault), "demand %v", demand)
	}
	require.InDelta(t, 1.0/6, ReplicaShare([]Replica{me(0, 0.1), other(10, 0.1), other(10, 0.1)}, 0.5), 1e-9, "the floors take at most half")
	// A hundred replicas, one with work: it takes all but the floors, the
	// 99 idle ones keep one floor together (each less than ShareLeast).
	rows := []Replica{me(300, 0.5)}
	for range 99 {
		rows = append(rows, other(0, 0.02/99))
	}
	require.InDelta(t, 0.98, ReplicaShare(rows, ShareFloorDefault), 1e-9)
	rows[0], rows[1] = other(300, 0.5), me(0, 0.02/99)
	require.InDelta(t, 0.02/99, ReplicaShare(rows, ShareFloorDefault), 1e-12)
	// All busy: the floors are 0.5% each, demand divides the rest.
	rows = []Replica{me(300, 0.01)}
	for range 99 {
		rows = append(rows, other(3, 0.001))
	}
	require.InDelta(t, 0.005+0.5*300.0/597, ReplicaShare(rows, ShareFloorDefault), 1e-9)
	require.Equal(t, ShareLeast, LedgerShare(0))
	require.Equal(t, 0.0002, LedgerShare(0.0002))
	require.Equal(t, ShareLeast, ReplicaShare([]Replica{me(0, 0.5), other(10, 1)}, 0), "a floor of 0 leaves the least share")
}

// TestReplicaShareShortBucket: once a row says the provider enforces a
// short bucket, one replica holds the whole quota and the others none:
// the holder in place while it has demand, else the replica with demand
// on the largest share, the largest demand, the first name; it still
// takes only what the others leave.
func TestReplicaShareShortBucket(t *testing.T) {
	t.Parallel()
	row := func(name string, demand, share float64) Replica {
		return Replica{Name: name, Demand: demand, Share: share, Short: true}
	}
	me := func(r Replica) Replica { r.Self = true; return r }
	none := ShareLeast // what a replica on share 0 writes
	for _, tc := range []struct {
		name string
		rows []Replica
		want float64
	}{
		{"alone", []Replica{me(row("a", 10, 1))}, 1},
		{"the holder keeps it while it has demand", []Replica{me(row("b", 1, 1)), row("a", 300, none), row("c", 300, none)}, 1},
		{"the others hold none", []Replica{me(row("a", 300, none)), row("b", 1, 1), row("c", 300, none)}, 0},
		{"one row is enough to tell the kind", []Replica{me(Replica{Name: "a", Demand: 300, Share: none}), row("b", 1, 1)}, 0},
		{"from thirds: the largest share holds", []Replica{me(row("b", 10, 0.34)), row("a", 10, 0.33), row("c", 10, 0.33)}, 0.34},
		{"from thirds: the others lower at once", []Replica{me(row("a", 10, 0.33)), row("b", 10, 0.34), row("c", 10, 0.33)}, 0},
		{"then the holder takes what they left", []Replica{me(row("b", 10, 0.34)), row("a", 10, none), row("c", 10, 0.33)}, 0.67},
		{"equal shares: the largest demand", []Replica{me(row("b", 20, 1.0/3)), row("a", 10, 1.0/3), row("c", 10, 1.0/3)}, 1.0 / 3},
		{"equal shares and demands: the first name", []Replica{me(row("a", 10, 1.0/3)), row("b", 10, 1.0/3), row("c", 10, 1.0/3)}, 1.0 / 3},
		{"not the first name", []Replica{me(row("b", 10, 1.0/3)), row("a", 10, 1.0/3), row("c", 10, 1.0/3)}, 0},
		{"an idle holder hands it to one with demand", []Replica{me(row("a", 0, 1)), row("b", 1, none), row("c", 2, none)}, 0},
		{"to the largest demand", []Replica{me(row("c", 2, none)), row("a", 0, 1), row("b", 1, none)}, 0},
		{"which waits until the idle holder lowered", []Replica{me(row("c", 2, none)), row("a", 0, none), row("b", 1, none)}, 1},
		{"nobody has demand: the holder keeps it", []Replica{me(row("b", 0, 1)), row("a", 0, none)}, 1},
		{"a dead holder's quota moves", []Replica{me(row("a", 300, none)), row("c", 300, none)}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.InDelta(t, tc.want, ReplicaShare(tc.rows, ShareFloorDefault), 1e-9)
		})
	}
}
