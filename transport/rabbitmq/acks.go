package rabbitmq

import "slices"

// acks coalesces the acks of one channel: one basic.ack with the multiple
// flag settles every delivery up to its tag, one frame for a run instead of
// one each. Tags number the channel's deliveries across its consumers, so a
// run ends at a delivery not yet settled (still buffered, or handed out);
// the acks behind it go alone, at once, so a slow message never holds the
// others' (the broker stops at the prefetch count of unacked messages).
// The reasoning: transport/rabbitmq/doc.go.
type acks struct {
	// wake wakes the subscriber's sender; nil before Consume and once the
	// sender has stopped.
	wake chan struct{}
	// next is the lowest tag not yet settled on the wire; 0 means 1.
	next uint64
	// state is the state of the deliveries from next on that arrived.
	state map[uint64]ackState
	// loose counts the acked deliveries in state.
	loose int
}

type ackState uint8

const (
	// ackHeld: handed out, neither acked nor given back.
	ackHeld ackState = iota
	// ackAcked: acked by its holder, the ack not yet sent.
	ackAcked
	// ackSettled: settled on the wire (acked alone, or given back).
	ackSettled
)

// reset forgets a channel's deliveries for a new one's.
func (a *acks) reset() {
	a.next, a.loose = 1, 0
	clear(a.state)
}

// received records a delivery handed out.
func (a *acks) received(tag uint64) {
	if a.state == nil {
		a.state = make(map[uint64]ackState)
	}
	a.state[tag] = ackHeld
}

// acked records a held delivery's ack, to be sent by take.
func (a *acks) acked(tag uint64) {
	if st, ok := a.state[tag]; ok && st == ackHeld {
		a.state[tag] = ackAcked
		a.loose++
	}
}

// nacked records a delivery given back (its nack sent alone).
func (a *acks) nacked(tag uint64) {
	if a.state == nil {
		a.state = make(map[uint64]ackState)
	}
	if a.state[tag] == ackAcked {
		a.loose--
	}
	a.state[tag] = ackSettled
}

// take returns the acks to send and counts them sent: upTo, when not 0,
// is a tag to ack with the multiple flag (every delivery up to it is
// acked or settled); single are the acked tags after the first delivery
// still held or not yet arrived, in order, to ack alone.
func (a *acks) take() (upTo uint64, single []uint64) {
	a.next = max(a.next, 1)
	for {
		st, ok := a.state[a.next]
		if !ok || st == ackHeld {
			break
		}
		if st == ackAcked {
			upTo = a.next
			a.loose--
		}
		delete(a.state, a.next)
		a.next++
	}
	if a.loose == 0 {
		return upTo, nil
	}
	for tag, st := range a.state {
		if st == ackAcked {
			single = append(single, tag)
			a.state[tag] = ackSettled
		}
	}
	a.loose = 0
	slices.Sort(single)
	return upTo, single
}
