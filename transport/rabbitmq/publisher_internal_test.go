package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
)

// The refusal of a message over max_message_size is told apart from other
// channel closes, and is not retried. (The local broker's limit is 128 MiB
// and is shared: the test does not send such a message.)
func TestTooLargeIsRejected(t *testing.T) {
	t.Parallel()
	big := &amqp.Error{Code: amqp.PreconditionFailed, Recover: true,
		Reason: "PRECONDITION_FAILED - message size 134217729 is larger than configured max size 134217728"}
	require.True(t, tooLarge(big))
	for _, other := range []*amqp.Error{
		nil,
		{Code: amqp.PreconditionFailed, Recover: true, Reason: "PRECONDITION_FAILED - inequivalent arg 'x-queue-type'"},
		{Code: amqp.AccessRefused, Recover: true, Reason: "ACCESS_REFUSED - write access to queue 'q' refused"},
		{Code: amqp.ConnectionForced, Reason: "CONNECTION_FORCED - broker forced connection closure"},
	} {
		require.False(t, tooLarge(other), "%v", other)
	}
	require.False(t, connLost(fmt.Errorf("%w: %w", transport.ErrMessageRejected, big)), "a refused message is not retried")
	require.True(t, connLost(amqp.ErrClosed))
}

// writesConn records each write it is given, and fails them once broken.
type writesConn struct {
	net.Conn // nil: only Write and Close are called
	writes   []string
	broken   bool
	closed   bool
}

func (w *writesConn) Write(p []byte) (int, error) {
	if w.broken {
		return 0, errors.New("broken pipe")
	}
	w.writes = append(w.writes, string(p))
	return len(p), nil
}

func (w *writesConn) Close() error { w.closed = true; return nil }

// A corked socket holds the writes and sends them as one, in order, once;
// uncorked, writes go through as they come. A failed flush closes the
// socket and fails what follows, so nothing held is taken for sent.
func TestCorkConn(t *testing.T) {
	t.Parallel()
	w := &writesConn{}
	c := &corkConn{Conn: w}
	_, err := c.Write([]byte("a"))
	require.NoError(t, err)
	c.cork()
	for _, p := range []string{"b", "cd", "e"} {
		n, err := c.Write([]byte(p))
		require.NoError(t, err)
		require.Equal(t, len(p), n)
	}
	require.Equal(t, []string{"a"}, w.writes, "held while corked")
	require.NoError(t, c.uncork())
	require.Equal(t, []string{"a", "bcde"}, w.writes)
	require.NoError(t, c.uncork(), "nothing held: no write")
	_, err = c.Write([]byte("f"))
	require.NoError(t, err)
	require.Equal(t, []string{"a", "bcde", "f"}, w.writes)

	c.cork()
	_, err = c.Write([]byte("g"))
	require.NoError(t, err)
	w.broken = true
	require.ErrorContains(t, c.uncork(), "broken pipe")
	require.True(t, w.closed)
	w.broken = false
	_, err = c.Write([]byte("h"))
	require.ErrorContains(t, err, "broken pipe", "the socket stays failed")
	require.ErrorContains(t, c.uncork(), "broken pipe")
	require.Equal(t, []string{"a", "bcde", "f"}, w.writes)
}

// failingWrite fails its next write when fail is set, and nothing else:
// the connection stays open for reading, so the AMQP connection on it
// does not know the write was lost.
type failingWrite struct {
	net.Conn
	fail *atomic.Bool
}

func (f *failingWrite) Write(p []byte) (int, error) {
	if f.fail.CompareAndSwap(true, false) {
		return 0, errors.New("injected write failure")
	}
	return f.Conn.Write(p)
}

// A window whose one write fails is not taken for sent: the publisher
// redials and publishes every message of it, each once.
func TestPublishWindowWriteFails(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q := rabbitmqtest.NewQueue(t)
	p, err := NewPublisher(Config{URL: rabbitmqtest.URL(), ReconnectMin: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	var fail atomic.Bool
	dials := 0
	p.dialer.openSocket = func(network, addr string, timeout time.Duration) (net.Conn, error) {
		dials++ // under p.mu: one dial at a time
		c, err := net.DialTimeout(network, addr, timeout)
		if err != nil {
			return nil, err
		}
		return &failingWrite{Conn: c, fail: &fail}, nil
	}
	require.NoError(t, p.Publish(ctx, q, transport.Message{Value: []byte("first")}))
	fail.Store(true)
	var msgs []transport.Message
	for i := range 10 {
		msgs = append(msgs, transport.Message{Value: []byte(strconv.Itoa(i))})
	}
	require.NoError(t, p.Publish(ctx, q, msgs...))
	require.False(t, fail.Load(), "the window's write failed")
	require.Equal(t, 2, dials, "redialed once")

	s, err := NewSubscriber(Config{URL: rabbitmqtest.URL(), Queue: q})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	depth, err := s.Depth(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(11), depth, "every message once")
}

// A reply refused as unroutable reads the returns of its whole window:
// none is left to the returns of later replies, whose ids would pile up
// for as long as the connection lives.
func TestUnroutableReplyTakesItsReturns(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q := rabbitmqtest.NewQueue(t)
	p, err := NewPublisher(Config{URL: rabbitmqtest.URL()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	require.NoError(t, p.Publish(ctx, q, transport.Message{Value: []byte("x")})) // declares q
	var msgs []transport.Message
	for i := range 8 {
		msgs = append(msgs, transport.Message{ID: fmt.Sprintf("gone-%d", i), Value: []byte("x")})
	}
	require.ErrorIs(t, p.Reply(ctx, q+"-gone", msgs...), transport.ErrUnroutable)
	require.NoError(t, p.Reply(ctx, q, transport.Message{ID: "there", Value: []byte("x")}))
	p.returned.mu.Lock()
	defer p.returned.mu.Unlock()
	require.Empty(t, p.returned.ids)
}

// heldReads holds the reads of its connection while held is set, as a
// broker slow to answer would; Close lets them go.
type heldReads struct {
	net.Conn
	mu     sync.Mutex
	cond   *sync.Cond
	held   bool
	closed bool
}

func newHeldReads(c net.Conn) *heldReads {
	h := &heldReads{Conn: c}
	h.cond = sync.NewCond(&h.mu)
	return h
}

func (h *heldReads) hold(held bool) {
	h.mu.Lock()
	h.held = held
	h.mu.Unlock()
	h.cond.Broadcast()
}

func (h *heldReads) Read(p []byte) (int, error) {
	h.mu.Lock()
	for h.held && !h.closed {
		h.cond.Wait()
	}
	h.mu.Unlock()
	return h.Conn.Read(p)
}

func (h *heldReads) Close() error {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.cond.Broadcast()
	return h.Conn.Close()
}

// Replies given up before the broker confirmed them (their context
// ended) do not leave their returns unread on the connection: amqp091
// drops a return its listener has no room for, after 5 s of the reader
// stalled, and a reply whose return was dropped would be taken for
// delivered. The publisher drops the connection instead, and the next
// reply is answered on a new one.
func TestAbandonedRepliesDropTheConnection(t *testing.T) {
	t.Parallel()
	p, err := NewPublisher(Config{URL: rabbitmqtest.URL(), ConfirmWindow: 4})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	var sockets []*heldReads
	p.dialer.openSocket = func(network, addr string, timeout time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout(network, addr, timeout)
		if err != nil {
			return nil, err
		}
		h := newHeldReads(c)
		sockets = append(sockets, h) // under p.mu: one dial at a time
		return h, nil
	}
	gone := rabbitmqtest.NewQueue(t) // never declared: every reply is returned
	replies := func(round int) []transport.Message {
		msgs := make([]transport.Message, 4)
		for i := range msgs {
			msgs[i] = transport.Message{ID: fmt.Sprintf("%d-%d", round, i), Value: []byte("x")}
		}
		return msgs
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.ErrorIs(t, p.Reply(ctx, gone, replies(0)...), transport.ErrUnroutable)
	first := sockets[0]
	first.hold(true)
	// The read under way when the hold began may take the first reply's
	// answers; the next ones wait on the hold and are given up (without
	// the drop, each on the same connection).
	for round := 1; round <= 3; round++ {
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := p.Reply(short, gone, replies(round)...)
		cancel()
		require.Error(t, err, "round %d", round)
	}
	first.hold(false) // the returns of the given-up replies arrive
	// Within the 5 s amqp091 would stall its reader on each unread return.
	last, cancel := context.WithTimeout(ctx, 4*time.Second)
	defer cancel()
	require.ErrorIs(t, p.Reply(last, gone, replies(4)...), transport.ErrUnroutable)
	require.GreaterOrEqual(t, len(sockets), 2, "the connection of the given-up replies was dropped")
}
