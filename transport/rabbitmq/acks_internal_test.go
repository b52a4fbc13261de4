package rabbitmq

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The acks of a run of settled deliveries go as one multiple ack up to the
// last acked; a delivery held or not yet arrived ends the run, and the acks
// behind it go alone.
func TestAcksCoalesce(t *testing.T) {
	t.Parallel()
	type step struct {
		recv, ack, nack []uint64
		upTo            uint64
		single          []uint64
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"in order", []step{{recv: []uint64{1, 2, 3}, ack: []uint64{1, 2, 3}, upTo: 3}}},
		{"nothing acked", []step{{recv: []uint64{1, 2}}}},
		{"a held delivery ends the run", []step{
			{recv: []uint64{1, 2, 3, 4}, ack: []uint64{1, 3, 4}, upTo: 1, single: []uint64{3, 4}},
			{ack: []uint64{2}, upTo: 2},
			{recv: []uint64{5}, ack: []uint64{5}, upTo: 5},
		}},
		{"a delivery not yet arrived ends the run", []step{
			{recv: []uint64{1, 3}, ack: []uint64{1, 3}, upTo: 1, single: []uint64{3}},
			{recv: []uint64{2, 4}, ack: []uint64{4}, single: []uint64{4}},
		}},
		{"a given-back delivery is passed over", []step{
			{recv: []uint64{1, 2, 3}, nack: []uint64{2}, ack: []uint64{1, 3}, upTo: 3},
		}},
		{"the run passes a given-back delivery, stops at a held one", []step{
			{recv: []uint64{1, 2, 3}, ack: []uint64{1}, nack: []uint64{2}, upTo: 1},
			{ack: []uint64{3}, upTo: 3},
		}},
		{"an ack of an acked delivery counts once", []step{
			{recv: []uint64{1, 2}, ack: []uint64{2, 2}, single: []uint64{2}},
			{ack: []uint64{1}, upTo: 1},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a acks
			a.reset()
			for i, s := range tc.steps {
				for _, tag := range s.recv {
					a.received(tag)
				}
				for _, tag := range s.nack {
					a.nacked(tag)
				}
				for _, tag := range s.ack {
					a.acked(tag)
				}
				upTo, single := a.take()
				require.Equal(t, s.upTo, upTo, "step %d: multiple ack up to", i)
				require.Equal(t, s.single, single, "step %d: acks alone", i)
				upTo, single = a.take()
				require.Zero(t, upTo, "step %d: taken twice", i)
				require.Empty(t, single, "step %d: taken twice", i)
			}
		})
	}
}
