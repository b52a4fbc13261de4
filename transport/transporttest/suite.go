package transporttest

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/transport"
)

// TimeoutDefault is the default Features.Timeout.
const TimeoutDefault = 15 * time.Second

// Factory builds the adapter's parts for one test.
type Factory struct {
	// NewDest returns a new destination (topic or queue) name, unique to
	// the test, and removes it in t.Cleanup when the broker keeps it.
	NewDest func(t *testing.T) string
	// NewPublisher returns a publisher; the suite closes it.
	NewPublisher func(t *testing.T) transport.Publisher
	// NewSubscriber returns a subscriber to dest holding at most prefetch
	// unacked messages. Subscribers with the same group share progress (a
	// Kafka consumer group); queue brokers ignore group. The suite closes
	// it.
	NewSubscriber func(t *testing.T, dest, group string, prefetch int) transport.Subscriber
}

// Features declares what an adapter guarantees.
type Features struct {
	// Key: Message.Key is delivered as published.
	Key bool
	// Priority: Message.Priority is delivered as published.
	Priority bool
	// PriorityOrder: from a backlog, higher priority is delivered first.
	PriorityOrder bool
	// Redelivered: a message delivered again has Redelivered set.
	Redelivered bool
	// ExactRedelivery: after a consumer restart exactly the unacked
	// messages come back. Without it (Kafka) everything from the first
	// unacked offset of each partition comes back.
	ExactRedelivery bool
	// Depth: Subscriber.Depth reports ready plus unacked messages.
	Depth bool
	// DeliveryLimit is the delivery limit of the factory's subscribers; 0
	// when the adapter has none (Kafka redelivers a nacked message
	// forever). With a limit, a message handed back more often is
	// delivered once more with Message.Rejected set
	// (transport.RejectedDeliveryLimit), and is gone once that delivery is
	// acked.
	DeliveryLimit int
	// ReplyProperties: Message.ReplyTo, CorrelationID and ID are
	// delivered as published (RabbitMQ's reply_to, correlation_id and
	// message_id properties).
	ReplyProperties bool
	// Reply: the publisher is a transport.Replier whose replies reach a
	// subscriber of their destination with their value and headers.
	Reply bool
	// ReplyUnroutable: a Reply to a destination that does not exist fails
	// with transport.ErrUnroutable (RabbitMQ; Kafka creates the topic).
	ReplyUnroutable bool
	// BreakConnection, when not nil, severs sub's broker connection the way
	// a network failure would; the suite then checks that consuming resumes
	// on the same channel and that the unacked messages come back.
	BreakConnection func(t *testing.T, sub transport.Subscriber)
	// Timeout bounds every wait for a delivery or a depth value.
	// Default TimeoutDefault.
	Timeout time.Duration
}

// Run runs the conformance suite as parallel subtests of t.
func Run(t *testing.T, f Factory, feat Features) {
	feat.Timeout = cmp.Or(feat.Timeout, TimeoutDefault)
	s := &suite{f: f, feat: feat}
	tests := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"RoundTrip", s.roundTrip},
		{"ManyOnce", s.manyOnce},
		{"UnackedComeBack", s.unackedComeBack},
		{"NackRedelivers", s.nackRedelivers},
		{"DeliveryLimit", s.deliveryLimit},
		{"PrefetchBound", s.prefetchBound},
		{"CloseDuringConsume", s.closeDuringConsume},
		{"CancelDuringConsume", s.cancelDuringConsume},
		{"AckAfterClose", s.ackAfterClose},
		{"ClosedErrors", s.closedErrors},
		{"Depth", s.depth},
		{"PriorityOrder", s.priorityOrder},
		{"PublishNewDest", s.publishNewDest},
		{"Reconnect", s.reconnect},
		{"ReplyProperties", s.replyProperties},
		{"Reply", s.reply},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

type suite struct {
	f    Factory
	feat Features
}

type bundle struct {
	dest  string
	group string
	pub   transport.Publisher
}

func (s *suite) setup(t *testing.T) bundle {
	t.Helper()
	pub := s.f.NewPublisher(t)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })
	return bundle{dest: s.f.NewDest(t), group: "g-" + strconv.FormatInt(time.Now().UnixNano(), 36), pub: pub}
}

func (s *suite) subscribe(t *testing.T, b bundle, prefetch int) (transport.Subscriber, <-chan *transport.Message) {
	t.Helper()
	sub := s.f.NewSubscriber(t, b.dest, b.group, prefetch)
	t.Cleanup(func() { require.NoError(t, sub.Close()) })
	ch, err := sub.Consume(context.Background())
	require.NoError(t, err)
	return sub, ch
}

func (s *suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), s.feat.Timeout)
	t.Cleanup(cancel)
	return ctx
}

// publishN publishes messages whose values are prefix0..prefix(n-1).
func (s *suite) publishN(t *testing.T, b bundle, prefix string, n int) []string {
	t.Helper()
	var vals []string
	var msgs []transport.Message
	for i := range n {
		v := prefix + strconv.Itoa(i)
		vals = append(vals, v)
		msgs = append(msgs, transport.Message{Key: []byte("k" + strconv.Itoa(i%7)), Value: []byte(v)})
	}
	for len(msgs) > 0 {
		k := min(len(msgs), 100)
		require.NoError(t, b.pub.Publish(s.ctx(t), b.dest, msgs[:k]...))
		msgs = msgs[k:]
	}
	return vals
}

// receive waits for n messages.
func (s *suite) receive(t *testing.T, ch <-chan *transport.Message, n int) []*transport.Message {
	t.Helper()
	var got []*transport.Message
	timeout := time.After(s.feat.Timeout)
	for len(got) < n {
		select {
		case m, ok := <-ch:
			require.True(t, ok, "consume channel closed after %d of %d messages", len(got), n)
			got = append(got, m)
		case <-timeout:
			require.FailNow(t, "timed out", "received %d of %d messages", len(got), n)
		}
	}
	return got
}

// receiveUntil receives until every value in want was seen.
func (s *suite) receiveUntil(t *testing.T, ch <-chan *transport.Message, want map[string]bool) []*transport.Message {
	t.Helper()
	missing := map[string]bool{}
	for v := range want {
		missing[v] = true
	}
	var got []*transport.Message
	timeout := time.After(s.feat.Timeout)
	for len(missing) > 0 {
		select {
		case m, ok := <-ch:
			require.True(t, ok, "consume channel closed with %d values missing", len(missing))
			got = append(got, m)
			delete(missing, string(m.Value))
		case <-timeout:
			require.FailNow(t, "timed out", "%d values never delivered: %v", len(missing), missing)
		}
	}
	return got
}

// nothing asserts that no message arrives for a short while.
func nothing(t *testing.T, ch <-chan *transport.Message, d time.Duration) {
	t.Helper()
	select {
	case m := <-ch:
		require.FailNow(t, "unexpected delivery", "value %q", m.Value)
	case <-time.After(d):
	}
}

func (s *suite) ackAll(t *testing.T, msgs []*transport.Message) {
	t.Helper()
	for _, m := range msgs {
		require.NoError(t, m.Ack(s.ctx(t)))
	}
}

func (s *suite) waitDepth(t *testing.T, sub transport.Subscriber, want int64) {
	t.Helper()
	deadline := time.Now().Add(s.feat.Timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		got, err := sub.Depth(s.ctx(t))
		if err == nil && got == want {
			return
		}
		if time.Now().After(deadline) {
			require.NoError(t, err)
			require.Equal(t, want, got, "depth")
		}
		<-tick.C
	}
}

func values(msgs []*transport.Message) []string {
	var v []string
	for _, m := range msgs {
		v = append(v, string(m.Value))
	}
	return v
}

func (s *suite) roundTrip(t *testing.T) {
	b := s.setup(t)
	sent := []transport.Message{
		{Key: []byte("tenant-a"), Value: []byte(`{"id":"1"}`), Headers: map[string]string{"x-reason": "none", "x-n": "1"}, Priority: 9},
		{Key: []byte("tenant-b"), Value: []byte(`{"id":"2"}`), Priority: 5},
		{Value: []byte(`{"id":"3"}`), Headers: map[string]string{"x-only": "v"}},
	}
	require.NoError(t, b.pub.Publish(s.ctx(t), b.dest, sent...))
	_, ch := s.subscribe(t, b, 10)
	got := s.receive(t, ch, len(sent))
	byValue := map[string]*transport.Message{}
	for _, m := range got {
		byValue[string(m.Value)] = m
	}
	for _, want := range sent {
		m := byValue[string(want.Value)]
		require.NotNil(t, m, "value %s not delivered", want.Value)
		require.Equal(t, len(want.Headers), len(m.Headers), "headers of %s: %v", want.Value, m.Headers)
		for k, v := range want.Headers {
			require.Equal(t, v, m.Headers[k], "header %s of %s", k, want.Value)
		}
		if s.feat.Key {
			require.Equal(t, string(want.Key), string(m.Key))
		}
		if s.feat.Priority {
			require.Equal(t, want.Priority, m.Priority)
		}
		require.NotEmpty(t, m.Source)
		require.False(t, m.Redelivered)
		require.False(t, m.ReceivedAt.IsZero())
	}
	s.ackAll(t, got)
}

func (s *suite) manyOnce(t *testing.T) {
	b := s.setup(t)
	vals := s.publishN(t, b, "m", 500)
	sub, ch := s.subscribe(t, b, 50)
	seen := map[string]int{}
	for range vals {
		m := s.receive(t, ch, 1)[0]
		seen[string(m.Value)]++
		require.NoError(t, m.Ack(s.ctx(t)))
	}
	for _, v := range vals {
		require.Equal(t, 1, seen[v], "value %s", v)
	}
	require.NoError(t, sub.Close())
	if s.feat.Depth {
		probe := s.f.NewSubscriber(t, b.dest, b.group, 1)
		t.Cleanup(func() { require.NoError(t, probe.Close()) })
		s.waitDepth(t, probe, 0)
	}
}

func (s *suite) unackedComeBack(t *testing.T) {
	b := s.setup(t)
	vals := s.publishN(t, b, "u", 20)
	sub1, ch1 := s.subscribe(t, b, 20)
	got := s.receive(t, ch1, len(vals))
	acked, unacked := map[string]bool{}, map[string]bool{}
	for i, m := range got {
		if i%3 == 0 {
			require.NoError(t, m.Ack(s.ctx(t)))
			acked[string(m.Value)] = true
		} else {
			unacked[string(m.Value)] = true
		}
	}
	require.NoError(t, sub1.Close())

	sub2, ch2 := s.subscribe(t, b, 20)
	again := s.receiveUntil(t, ch2, unacked)
	if s.feat.ExactRedelivery {
		require.ElementsMatch(t, keys(unacked), values(again))
	}
	for _, m := range again {
		if s.feat.Redelivered && unacked[string(m.Value)] {
			require.True(t, m.Redelivered, "value %s", m.Value)
		}
	}
	if s.feat.Depth && s.feat.ExactRedelivery {
		s.waitDepth(t, sub2, int64(len(unacked)))
	}
	s.ackAll(t, again)
	if s.feat.Depth {
		s.drainToZero(t, sub2, ch2)
	}
}

// drainToZero acks whatever else arrives until sub reports depth 0: without
// ExactRedelivery, acked messages after the first unacked one come back too.
func (s *suite) drainToZero(t *testing.T, sub transport.Subscriber, ch <-chan *transport.Message) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(s.feat.Timeout)
	for {
		select {
		case m := <-ch:
			require.NoError(t, m.Ack(s.ctx(t)))
		case <-tick.C:
			d, err := sub.Depth(s.ctx(t))
			require.NoError(t, err)
			if d == 0 {
				return
			}
		case <-timeout:
			require.FailNow(t, "depth never reached 0")
		}
	}
}

func keys(m map[string]bool) []string {
	var k []string
	for v := range m {
		k = append(k, v)
	}
	return k
}

// nackRedelivers: every adapter hands a nacked message out again at once,
// marked Redelivered, however often it is nacked; only that message comes
// back, and once it is acked the depth returns to 0 (on Kafka the commit
// point waited at its offset).
func (s *suite) nackRedelivers(t *testing.T) {
	b := s.setup(t)
	s.publishN(t, b, "n", 5)
	sub, ch := s.subscribe(t, b, 5)
	got := s.receive(t, ch, 5)
	nacked := got[2]
	for _, m := range got {
		if m != nacked {
			require.NoError(t, m.Ack(s.ctx(t)))
		}
	}
	require.NoError(t, nacked.Nack(s.ctx(t)))
	require.NoError(t, nacked.Nack(s.ctx(t)), "a second settle of one delivery is a no-op")
	require.NoError(t, nacked.Ack(s.ctx(t)), "a settle of a nacked delivery is a no-op")
	for round := range 3 {
		m := s.receive(t, ch, 1)[0]
		require.Equal(t, string(nacked.Value), string(m.Value), "round %d: only the nacked message comes back", round)
		require.True(t, m.Redelivered, "round %d", round)
		if s.feat.Depth && s.feat.ExactRedelivery {
			s.waitDepth(t, sub, 1)
		}
		if round < 2 {
			require.NoError(t, m.Nack(s.ctx(t)))
			continue
		}
		require.NoError(t, m.Ack(s.ctx(t)))
	}
	if s.feat.Depth {
		s.waitDepth(t, sub, 0)
	}
	nothing(t, ch, 200*time.Millisecond)
}

// deliveryLimit: a message nacked on every delivery is delivered
// DeliveryLimit+1 times, then once more marked rejected with its body,
// headers and priority; acking that ends it, and the message after it was
// never held up.
func (s *suite) deliveryLimit(t *testing.T) {
	if s.feat.DeliveryLimit == 0 {
		t.Skip("adapter has no delivery limit")
	}
	b := s.setup(t)
	poison := transport.Message{Value: []byte("poison"), Headers: map[string]string{"x-tenant": "acme"}, Priority: 5}
	require.NoError(t, b.pub.Publish(s.ctx(t), b.dest, poison))
	sub, ch := s.subscribe(t, b, 5)
	for n := 1; n <= s.feat.DeliveryLimit+1; n++ {
		m := s.receive(t, ch, 1)[0]
		require.Equal(t, "poison", string(m.Value))
		require.Empty(t, m.Rejected, "delivery %d of %d allowed", n, s.feat.DeliveryLimit+1)
		require.NoError(t, m.Nack(s.ctx(t)))
	}
	m := s.receive(t, ch, 1)[0]
	require.Equal(t, "poison", string(m.Value))
	require.Equal(t, transport.RejectedDeliveryLimit, m.Rejected)
	require.Equal(t, 1, m.RejectedCount)
	require.Equal(t, "acme", m.Headers["x-tenant"])
	require.NotEmpty(t, m.Source)
	if s.feat.Priority {
		require.Equal(t, uint8(5), m.Priority)
	}
	require.NoError(t, m.Nack(s.ctx(t)), "a rejected message can be handed back too")
	m = s.receive(t, ch, 1)[0]
	require.Equal(t, transport.RejectedDeliveryLimit, m.Rejected)
	require.NoError(t, m.Ack(s.ctx(t)))

	s.publishN(t, b, "after", 1)
	m = s.receive(t, ch, 1)[0]
	require.Equal(t, "after0", string(m.Value))
	require.Empty(t, m.Rejected)
	require.NoError(t, m.Ack(s.ctx(t)))
	nothing(t, ch, 200*time.Millisecond)
	if s.feat.Depth {
		s.waitDepth(t, sub, 0)
	}
}

func (s *suite) prefetchBound(t *testing.T) {
	b := s.setup(t)
	s.publishN(t, b, "p", 6)
	_, ch := s.subscribe(t, b, 3)
	first := s.receive(t, ch, 3)
	nothing(t, ch, 300*time.Millisecond)
	require.NoError(t, first[0].Ack(s.ctx(t)))
	next := s.receive(t, ch, 1)
	nothing(t, ch, 100*time.Millisecond)
	s.ackAll(t, append(first[1:], next...))
	s.ackAll(t, s.receive(t, ch, 2))
}

func closedWithin(t *testing.T, ch <-chan *transport.Message, d time.Duration) {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timeout:
			require.FailNow(t, "consume channel not closed")
		}
	}
}

func (s *suite) closeDuringConsume(t *testing.T) {
	b := s.setup(t)
	sub, ch := s.subscribe(t, b, 5)
	s.publishN(t, b, "c", 2)
	s.receive(t, ch, 1)
	require.NoError(t, sub.Close())
	closedWithin(t, ch, s.feat.Timeout)
	require.NoError(t, sub.Close(), "second Close")
}

func (s *suite) cancelDuringConsume(t *testing.T) {
	b := s.setup(t)
	sub := s.f.NewSubscriber(t, b.dest, b.group, 5)
	t.Cleanup(func() { require.NoError(t, sub.Close()) })
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := sub.Consume(ctx)
	require.NoError(t, err)
	s.publishN(t, b, "x", 1)
	m := s.receive(t, ch, 1)[0]
	cancel()
	closedWithin(t, ch, s.feat.Timeout)
	// Work handed out before the cancel can still be acked.
	require.NoError(t, m.Ack(s.ctx(t)))
}

func (s *suite) ackAfterClose(t *testing.T) {
	b := s.setup(t)
	s.publishN(t, b, "a", 2)
	sub, ch := s.subscribe(t, b, 5)
	got := s.receive(t, ch, 2)
	require.NoError(t, sub.Close())
	require.ErrorIs(t, got[0].Ack(s.ctx(t)), transport.ErrClosed)
	require.ErrorIs(t, got[1].Nack(s.ctx(t)), transport.ErrClosed)
}

func (s *suite) closedErrors(t *testing.T) {
	b := s.setup(t)
	sub, _ := s.subscribe(t, b, 5)
	_, err := sub.Consume(context.Background())
	require.ErrorIs(t, err, transport.ErrConsuming)
	require.NoError(t, sub.Close())
	_, err = sub.Consume(context.Background())
	require.ErrorIs(t, err, transport.ErrClosed)
	_, err = sub.Depth(s.ctx(t))
	require.ErrorIs(t, err, transport.ErrClosed)

	pub := s.f.NewPublisher(t)
	require.NoError(t, pub.Close())
	require.NoError(t, pub.Close(), "second Close")
	err = pub.Publish(s.ctx(t), b.dest, transport.Message{Value: []byte("late")})
	require.ErrorIs(t, err, transport.ErrClosed)
}

func (s *suite) depth(t *testing.T) {
	if !s.feat.Depth {
		t.Skip("adapter does not report depth")
	}
	b := s.setup(t)
	probe := s.f.NewSubscriber(t, b.dest, b.group, 1)
	t.Cleanup(func() { require.NoError(t, probe.Close()) })
	s.waitDepth(t, probe, 0)
	s.publishN(t, b, "d", 7)
	s.waitDepth(t, probe, 7)
	sub := s.f.NewSubscriber(t, b.dest, b.group, 3)
	t.Cleanup(func() { require.NoError(t, sub.Close()) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := sub.Consume(ctx)
	require.NoError(t, err)
	got := s.receive(t, ch, 3)
	s.waitDepth(t, sub, 7)
	// Stop consuming before acking so that no further message is in transit
	// to the subscriber (RabbitMQ cannot count those), then ack: handed-out
	// messages can still be acked after the Consume ctx ended.
	cancel()
	closedWithin(t, ch, s.feat.Timeout)
	s.ackAll(t, got)
	s.waitDepth(t, sub, 4)
	s.waitDepth(t, probe, 4)
}

func (s *suite) priorityOrder(t *testing.T) {
	if !s.feat.PriorityOrder {
		t.Skip("adapter does not order by priority")
	}
	b := s.setup(t)
	var msgs []transport.Message
	for i, p := range []uint8{1, 1, 5, 9, 5, 0} {
		msgs = append(msgs, transport.Message{Value: []byte(fmt.Sprintf("%d-%d", p, i)), Priority: p})
	}
	require.NoError(t, b.pub.Publish(s.ctx(t), b.dest, msgs...))
	_, ch := s.subscribe(t, b, 1)
	var order []string
	for range msgs {
		m := s.receive(t, ch, 1)[0]
		order = append(order, string(m.Value))
		require.NoError(t, m.Ack(s.ctx(t)))
	}
	require.Equal(t, []string{"9-3", "5-2", "5-4", "1-0", "1-1", "0-5"}, order)
}

func (s *suite) publishNewDest(t *testing.T) {
	b := s.setup(t)
	b.dest += ".dlq"
	s.publishN(t, b, "q", 3)
	_, ch := s.subscribe(t, b, 5)
	got := s.receive(t, ch, 3)
	require.ElementsMatch(t, []string{"q0", "q1", "q2"}, values(got))
	s.ackAll(t, got)
}

func (s *suite) reconnect(t *testing.T) {
	if s.feat.BreakConnection == nil {
		t.Skip("adapter has no connection to break")
	}
	b := s.setup(t)
	vals := s.publishN(t, b, "r", 6)
	sub, ch := s.subscribe(t, b, 10)
	held := s.receive(t, ch, 3)
	s.feat.BreakConnection(t, sub)

	// Messages delivered on the lost connection but handed out after the
	// break are stale too; all of them come back on the new connection.
	pending := map[string]bool{}
	for _, v := range vals {
		pending[v] = true
	}
	timeout := time.After(s.feat.Timeout)
	for len(pending) > 0 {
		select {
		case m, ok := <-ch:
			require.True(t, ok, "consume channel closed")
			if err := m.Ack(s.ctx(t)); err != nil {
				require.ErrorIs(t, err, transport.ErrStaleDelivery)
				continue
			}
			delete(pending, string(m.Value))
		case <-timeout:
			require.FailNow(t, "timed out", "never acked after the break: %v", pending)
		}
	}
	for _, m := range held {
		require.ErrorIs(t, m.Ack(s.ctx(t)), transport.ErrStaleDelivery)
	}
	// The subscriber keeps consuming on the same channel after the break.
	// An Ack may return before its ack is sent (RabbitMQ's are sent after):
	// one taken between the break and the subscriber seeing it is lost with
	// the connection, and its message comes back once more, before these.
	after := map[string]bool{}
	for _, v := range s.publishN(t, b, "after", 2) {
		after[v] = true
	}
	timeout = time.After(s.feat.Timeout)
	for len(after) > 0 {
		select {
		case m, ok := <-ch:
			require.True(t, ok, "consume channel closed")
			v := string(m.Value)
			require.True(t, after[v] || slices.Contains(vals, v), "a message nobody published: %q", v)
			require.NoError(t, m.Ack(s.ctx(t)))
			delete(after, v)
		case <-timeout:
			require.FailNow(t, "timed out", "never received after the break: %v", after)
		}
	}
	if s.feat.Depth {
		s.waitDepth(t, sub, 0)
	}
}

// replyProperties: a message's reply_to, correlation id and id arrive.
func (s *suite) replyProperties(t *testing.T) {
	if !s.feat.ReplyProperties {
		t.Skip("the adapter carries no reply properties")
	}
	b := s.setup(t)
	_, ch := s.subscribe(t, b, 4)
	require.NoError(t, b.pub.Publish(s.ctx(t), b.dest, transport.Message{Value: []byte("v"), ReplyTo: "replies-q",
		CorrelationID: "corr-1", ID: "msg-1"}))
	m := s.receive(t, ch, 1)[0]
	require.Equal(t, "replies-q", m.ReplyTo)
	require.Equal(t, "corr-1", m.CorrelationID)
	require.Equal(t, "msg-1", m.ID)
	require.NoError(t, m.Ack(s.ctx(t)))
}

// reply: replies reach their destination with their value, key and
// headers; a reply to nowhere fails with ErrUnroutable when the adapter
// says so.
func (s *suite) reply(t *testing.T) {
	if !s.feat.Reply {
		t.Skip("the adapter does not reply")
	}
	b := s.setup(t)
	r, ok := b.pub.(transport.Replier)
	require.True(t, ok, "the publisher is a transport.Replier")
	_, ch := s.subscribe(t, b, 4)
	require.NoError(t, r.Reply(s.ctx(t), b.dest, transport.Message{Key: []byte("job-1"), Value: []byte(`{"event_id":"e1"}`),
		Headers: map[string]string{"llmq-event-id": "e1"}, CorrelationID: "c1", ID: "e1"}))
	m := s.receive(t, ch, 1)[0]
	require.Equal(t, `{"event_id":"e1"}`, string(m.Value))
	require.Equal(t, "e1", m.Headers["llmq-event-id"])
	if s.feat.Key {
		require.Equal(t, "job-1", string(m.Key))
	}
	if s.feat.ReplyProperties {
		require.Equal(t, "c1", m.CorrelationID)
		require.Equal(t, "e1", m.ID)
	}
	require.NoError(t, m.Ack(s.ctx(t)))
	if s.feat.ReplyUnroutable {
		err := r.Reply(s.ctx(t), "nowhere-"+strconv.FormatInt(time.Now().UnixNano(), 36), transport.Message{Value: []byte("x"), ID: "e2"})
		require.ErrorIs(t, err, transport.ErrUnroutable)
	}
}
