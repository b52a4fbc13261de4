package shaping

import "cmp"

// ShareFloorDefault is the least share of a quota a live replica runs on,
// idle or not (when fewer than 1/ShareFloorDefault replicas share it), on
// a provider that enforces per minute: a replica that receives work can
// start at once, and its share grows at the next renewal of the ledger.
const ShareFloorDefault = 0.02

// ShareLeast is the least positive share: what [ReplicaShare] gives a
// replica that the others leave nothing of a per-minute quota, and what a
// replica that holds none of a short bucket (share 0) writes to a ledger
// whose shares are positive. On a short bucket a share at or below it
// counts as none.
const ShareLeast = 1e-3

// Replica is one live replica's row of a quota ledger, as [ReplicaShare]
// reads it: its name, the demand it declared, the share it runs on, and
// whether it learned that the provider enforces a short bucket. Self marks
// the replica asking.
type Replica struct {
	Name          string
	Demand, Share float64
	Short         bool
	Self          bool
}

// ReplicaShare is the share of one provider quota that the replica marked
// Self should run on, from the live rows of the quota's ledger (its own
// included). Per minute, each busy replica gets the floor and the rest goes
// by demand; on a short bucket one replica, the holder, runs on all of it.
// It never takes more than the others leave (1 minus their shares); without
// its own row it is alone: share 1. Rules: docs/design/replicas.md#replicashare.
func ReplicaShare(rows []Replica, floor float64) float64 {
	n := float64(len(rows))
	self := -1
	short := false
	var demand float64
	for i, r := range rows {
		demand += max(0, r.Demand)
		short = short || r.Short
		if r.Self && self < 0 {
			self = i
		}
	}
	if self < 0 {
		return 1
	}
	if short {
		return holderShare(rows, self)
	}
	var others float64
	idle := 0
	for i, r := range rows {
		if i != self {
			others += r.Share
		}
		if !(r.Demand > 0) {
			idle++
		}
	}
	busyFloor, idleFloor := floors(floor, len(rows), idle)
	floor = busyFloor
	if !(rows[self].Demand > 0) {
		floor = idleFloor
	}
	target := 1 / n
	if demand > 0 {
		rest := 1 - float64(len(rows)-idle)*busyFloor - float64(idle)*idleFloor
		// Its part of the demand first: a replica alone gets exactly 1,
		// which (rest*d)/d may round below, and a lane on less than its
		// whole quota runs no staged burst (lane_trial.go).
		target = floor + rest*(max(0, rows[self].Demand)/demand)
	}
	share := max(floor, min(target, 1-others))
	if share <= 0 {
		// A floor of 0 and the others holding everything: the least
		// share a lane accepts, until they lower theirs.
		share = ShareLeast
	}
	return min(1, share)
}

// floors are the floors of a replica with demand and of an idle one, of n
// replicas of which idle have no demand: at most floor, and together at
// most half the quota (so demand decides the rest however many replicas
// run); the idle ones together keep at most one floor, which they do not
// use (docs/design/scale.md).
func floors(floor float64, n, idle int) (busy, idleOne float64) {
	busy = min(max(0, floor), 1/(2*float64(n)))
	if idle == 0 {
		return busy, busy
	}
	return busy, min(busy, max(0, floor)/float64(idle))
}

// LedgerShare is the share a replica writes to a quota ledger whose
// shares are positive: its share, or ShareLeast when it holds none.
func LedgerShare(share float64) float64 {
	if share > 0 {
		return min(1, share)
	}
	return ShareLeast
}

// holderShare is ReplicaShare on a short bucket: all that the others leave
// to the holder, none to the others.
func holderShare(rows []Replica, self int) float64 {
	holder := 0
	for i := 1; i < len(rows); i++ {
		if holderBefore(rows[i], rows[holder]) {
			holder = i
		}
	}
	if holder != self {
		return 0
	}
	var others float64
	for i, r := range rows {
		if i != self && r.Share > ShareLeast {
			others += r.Share
		}
	}
	return min(1, max(0, 1-others))
}

// holderBefore reports whether a comes before b for holding a short
// bucket: demand, then the larger share, the larger demand, the first
// name.
func holderBefore(a, b Replica) bool {
	if (a.Demand > 0) != (b.Demand > 0) {
		return a.Demand > 0
	}
	if c := cmp.Compare(a.Share, b.Share); c != 0 {
		return c > 0
	}
	if c := cmp.Compare(a.Demand, b.Demand); c != 0 {
		return c > 0
	}
	return a.Name < b.Name
}
