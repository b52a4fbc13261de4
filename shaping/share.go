package shaping

// ShareFloorDefault is the least share of a quota a live replica runs on,
// idle or not (when fewer than 1/ShareFloorDefault replicas share it): a
// replica that receives work can start at once, and its share grows at the
// next renewal of the ledger.
const ShareFloorDefault = 0.02

// Replica is one live replica's row of a quota ledger, as [ReplicaShare]
// reads it: the demand it declared and the share it runs on. Self marks
// the replica asking.
type Replica struct {
	Demand, Share float64
	Self          bool
}

// ReplicaShare is the share of one provider quota that the replica marked
// Self should run on, from the live rows of the quota's ledger (its own
// included): docs/design/replicas.md.
//
// Every replica gets the floor (at most 1/n of n replicas); the rest is
// divided in proportion to the demands (equally when no replica has any),
// so an idle replica's part goes to the busy ones. The share never takes
// more than the others leave: 1 minus the shares they run on. A replica
// whose part grows waits until the others have lowered theirs (at their
// next renewal), so together they never run on much more than the whole
// quota; a replica whose part shrinks lowers it at once. Without its own
// row (an empty ledger) the replica is alone: share 1.
func ReplicaShare(rows []Replica, floor float64) float64 {
	n := float64(len(rows))
	self := -1
	var demand, others float64
	for i, r := range rows {
		demand += max(0, r.Demand)
		if r.Self && self < 0 {
			self = i
			continue
		}
		others += r.Share
	}
	if self < 0 {
		return 1
	}
	floor = min(max(0, floor), 1/n)
	target := 1 / n
	if demand > 0 {
		target = floor + (1-n*floor)*max(0, rows[self].Demand)/demand
	}
	share := max(floor, min(target, 1-others))
	if share <= 0 {
		// A floor of 0 and the others holding everything: the least
		// share a lane accepts, until they lower theirs.
		share = minShare
	}
	return min(1, share)
}

// minShare is the share of a replica left nothing at all.
const minShare = 1e-3
