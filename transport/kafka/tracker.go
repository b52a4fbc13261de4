package kafka

// tracker follows the delivered offsets of one partition in one generation
// and computes the offset that may be committed: one past the end of the
// contiguous acked prefix. Offsets are delivered in increasing order (gaps,
// for compacted logs or transaction markers, are fine). Not safe for
// concurrent use; the Subscriber guards it.
type tracker struct {
	topic     string
	partition int
	// pending are the delivered offsets not yet below the commit point, in
	// delivery order; pending[head:] is live.
	pending []*delivery
	head    int
	// commitAt is the offset to commit (every offset below it is acked);
	// -1 until the first message was acked.
	commitAt int64
	// committed is the last offset committed to the group; -1 for none.
	committed int64
	// revoked is set when the generation ended; acks are then stale.
	revoked bool
}

// delivery is one delivered message's place in its tracker.
type delivery struct {
	t      *tracker
	offset int64
	acked  bool
	// settled is set by the first Ack or Nack; later ones are no-ops.
	settled bool
}

func newTracker(topic string, partition int) *tracker {
	return &tracker{topic: topic, partition: partition, commitAt: -1, committed: -1}
}

// add records a delivered offset.
func (t *tracker) add(offset int64) *delivery {
	d := &delivery{t: t, offset: offset}
	t.pending = append(t.pending, d)
	return d
}

// ack marks d acked and advances the commit point over the acked prefix.
func (t *tracker) ack(d *delivery) {
	d.acked = true
	for t.head < len(t.pending) && t.pending[t.head].acked {
		t.commitAt = t.pending[t.head].offset + 1
		t.pending[t.head] = nil
		t.head++
	}
	if t.head > 64 && t.head*2 > len(t.pending) {
		n := copy(t.pending, t.pending[t.head:])
		clear(t.pending[n:])
		t.pending = t.pending[:n]
		t.head = 0
	}
}

// toCommit returns the offset to commit and whether it moved since the last
// commit.
func (t *tracker) toCommit() (int64, bool) {
	return t.commitAt, t.commitAt > t.committed
}
