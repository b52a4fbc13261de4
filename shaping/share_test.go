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
	require.InDelta(t, 1.0/3, ReplicaShare([]Replica{me(0, 0.1), other(10, 0.1), other(10, 0.1)}, 0.5), 1e-9, "the floor is at most 1/n")
	require.Equal(t, minShare, ReplicaShare([]Replica{me(0, 0.5), other(10, 1)}, 0), "a floor of 0 leaves the least share")
}
