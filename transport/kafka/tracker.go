package kafka

import kafkago "github.com/segmentio/kafka-go"

// tracker follows the delivered offsets of one partition in one generation
// and computes the offset that may be committed: one past the end of the
// contiguous acked prefix. Offsets are added in increasing order (gaps, for
// compacted logs or transaction markers, are fine). A nacked delivery stays
// pending, so the commit point stops at it until its redelivery is acked.
// Not safe for concurrent use; the Subscriber guards it.
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

// delivery is one fetched message's place in its tracker. A nacked delivery
// is handed out again from msg (not fetched again), so it may be handed out
// several times; each hand-out is settled once.
type delivery struct {
	t      *tracker
	offset int64
	acked  bool
	// msg is the fetched message, kept for redelivery until acked.
	msg kafkago.Message
	// handouts counts the hand-outs; a settle names the one it settles.
	handouts int
	// outstanding is true between a hand-out and its Ack or Nack.
	outstanding bool
}

func newTracker(topic string, partition int) *tracker {
	return &tracker{topic: topic, partition: partition, commitAt: -1, committed: -1}
}

// add records a fetched message.
func (t *tracker) add(msg kafkago.Message) *delivery {
	d := &delivery{t: t, offset: msg.Offset, msg: msg}
	t.pending = append(t.pending, d)
	return d
}

// ack marks d acked and advances the commit point over the acked prefix.
func (t *tracker) ack(d *delivery) {
	d.acked = true
	d.msg = kafkago.Message{} // only a nacked message is needed again
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
