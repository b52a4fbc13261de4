package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
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
