package chaos_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/llmq/llmq/internal/chaos"
	"github.com/llmq/llmq/store/storetest"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newProxy(t *testing.T, target string) *chaos.Proxy {
	t.Helper()
	p, err := chaos.New(target)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })
	return ln.Addr().String()
}

// roundTrip writes a line on c and reads it back.
func roundTrip(c net.Conn, line string) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if got != line+"\n" {
		return errors.New("echo mismatch: " + got)
	}
	return nil
}

// dialRoundTrip dials addr and makes one round trip.
func dialRoundTrip(addr, line string) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	return roundTrip(c, line)
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestCutAndRestore(t *testing.T) {
	t.Parallel()
	p := newProxy(t, echoServer(t))
	live := dial(t, p.Addr())
	require.NoError(t, roundTrip(live, "before"))

	p.Cut()
	require.Error(t, roundTrip(live, "during"), "a live connection is reset by the cut")
	// A new connection is accepted (the port stays ours) and reset at once.
	require.Error(t, dialRoundTrip(p.Addr(), "during"), "a new connection is refused while cut")

	p.Restore()
	require.Error(t, roundTrip(live, "after"), "a connection the cut reset stays dead")
	require.NoError(t, roundTrip(dial(t, p.Addr()), "after"), "a new connection works after the restore")
}

func TestTargetDown(t *testing.T) {
	t.Parallel()
	p := newProxy(t, "127.0.0.1:1") // nothing listens on port 1
	require.Error(t, dialRoundTrip(p.Addr(), "x"), "a target that refuses is a reset client")
}

// Not parallel: it checks that no proxy goroutine at all is left, and the
// parallel tests (paused until the sequential ones end) have none yet.
func TestCloseEndsLinks(t *testing.T) {
	p, err := chaos.New(echoServer(t))
	require.NoError(t, err)
	c := dial(t, p.Addr())
	require.NoError(t, roundTrip(c, "x"))
	require.NoError(t, p.Close())
	stacks := func() string {
		buf := make([]byte, 1<<20)
		return string(buf[:runtime.Stack(buf, true)])
	}
	// No proxy goroutine outlives Close. One may still be seen on its way
	// out, between its deferred Done and its return (a stack taken at once
	// failed on that now and then), so its end is waited for, briefly.
	require.Eventually(t, func() bool { return !strings.Contains(stacks(), "chaos.(*Proxy)") },
		time.Second, time.Millisecond, "a proxy goroutine outlives Close")
	require.NoError(t, p.Close(), "a second Close is harmless")
	require.Error(t, roundTrip(c, "y"))
	_, err = net.DialTimeout("tcp", p.Addr(), time.Second)
	require.Error(t, err, "nothing listens after Close")
}

// withHost returns rawURL with its host:port replaced by addr.
func withHost(t *testing.T, rawURL, addr string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	u.Host = addr
	return u.String()
}

// Postgres through the proxy: the cut makes queries fail, and after the
// restore the pool reconnects by itself.
func TestPostgres(t *testing.T) {
	t.Parallel()
	base, err := url.Parse(storetest.BaseURL())
	require.NoError(t, err)
	p := newProxy(t, base.Host)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, withHost(t, base.String(), p.Addr()))
	require.NoError(t, err)
	defer pool.Close()
	query := func() error {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		var n int
		return pool.QueryRow(ctx, "SELECT 1").Scan(&n)
	}
	require.NoError(t, query())

	p.Cut()
	require.Error(t, query(), "the pooled connection was reset")
	require.Error(t, query(), "a new connection is refused")

	p.Restore()
	require.Eventually(t, func() bool { return query() == nil }, 10*time.Second, 20*time.Millisecond)
}

// RabbitMQ through the proxy: the cut closes the connection (NotifyClose
// fires) and refuses a redial; after the restore a redial works.
func TestRabbitMQ(t *testing.T) {
	t.Parallel()
	base, err := url.Parse(rabbitmqtest.URL())
	require.NoError(t, err)
	p := newProxy(t, base.Host)
	amqpURL := withHost(t, base.String(), p.Addr())
	conn, err := amqp.Dial(amqpURL)
	require.NoError(t, err)
	defer conn.Close()
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	ch, err := conn.Channel()
	require.NoError(t, err)
	q := rabbitmqtest.NewQueue(t)
	_, err = ch.QueueDeclare(q, false, true, false, false, nil)
	require.NoError(t, err)

	p.Cut()
	select {
	case aerr := <-closed:
		require.NotNil(t, aerr, "the connection is lost, not closed cleanly")
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the cut did not close the connection")
	}
	_, err = amqp.Dial(amqpURL)
	require.Error(t, err, "a redial is refused while cut")

	p.Restore()
	again, err := amqp.Dial(amqpURL)
	require.NoError(t, err)
	defer again.Close()
	ch, err = again.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclare(q, false, true, false, false, nil)
	require.NoError(t, err)
}
