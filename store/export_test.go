package store

import (
	"slices"
	"time"
)

// Transition is a declared status change, for the table test.
type Transition = transition

// Transitions lists every status change the store makes.
func Transitions() []*Transition { return slices.Clone(transitions) }

// QueuedOps is the number of operations waiting for a flush slot of s's
// group committer.
func QueuedOps(s *Store) int { return len(s.group.ops) }

// RecordOutboxAsArrays makes s's InsertOutbox record any number of jobs
// with its statement over arrays (below outboxArraysFrom it sends a
// statement per job).
func RecordOutboxAsArrays(s *Store) { s.outboxArraysFrom = 1 }

// UsageSQL is Usage's statement and its arguments for the usage at now.
func UsageSQL(now time.Time, tenant string) (string, []any) {
	scope, args := usageArgs(now, tenant)
	return usageSQL(scope), args
}
