package store

import "slices"

// Transition is a declared status change, for the table test.
type Transition = transition

// Transitions lists every status change the store makes.
func Transitions() []*Transition { return slices.Clone(transitions) }
