package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	ibackoff "github.com/llmq/llmq/internal/backoff"
)

// dialer opens AMQP connections and remembers the socket of the latest one,
// so the publisher can cork it and tests can sever it the way a network
// failure would.
type dialer struct {
	cfg Config
	// openSocket opens the TCP connection under an AMQP one: nil is
	// net.DialTimeout (tests wrap it to fail a write).
	openSocket func(network, addr string, timeout time.Duration) (net.Conn, error)

	mu   sync.Mutex
	sock *corkConn
}

func (d *dialer) dial() (*amqp.Connection, error) {
	conn, err := amqp.DialConfig(d.cfg.URL, amqp.Config{
		Heartbeat: 10 * time.Second,
		Locale:    "en_US",
		Dial: func(network, addr string) (net.Conn, error) {
			open := d.openSocket
			if open == nil {
				open = net.DialTimeout
			}
			c, err := open(network, addr, d.cfg.DialTimeout)
			if err != nil {
				return nil, err
			}
			cc := &corkConn{Conn: c}
			d.mu.Lock()
			d.sock = cc
			d.mu.Unlock()
			return cc, nil
		},
	})
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: dial: %w", err)
	}
	return conn, nil
}

// socket is the socket of the latest connection (nil before the first).
func (d *dialer) socket() *corkConn {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sock
}

// corkConn is a socket whose writes can be held back and sent as one:
// amqp091 writes each message's frames with a write of its own (a syscall,
// and a wakeup of the broker's reader, per message), and the publisher
// sends a window of messages at once.
type corkConn struct {
	net.Conn

	mu     sync.Mutex
	corked bool
	buf    []byte
	err    error // the failed flush's: the socket is closed
}

// corkBufMax is the largest buffer kept between windows.
const corkBufMax = 1 << 20

// Write sends p, or holds it while corked.
func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.err != nil:
		return 0, c.err
	case c.corked:
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// cork holds the writes until uncork.
func (c *corkConn) cork() {
	c.mu.Lock()
	c.corked = true
	c.mu.Unlock()
}

// uncork sends what was held, in one write. When that fails the socket is
// closed (the connection's reader ends it, failing what awaits a confirm)
// and the error returned: nothing held may be taken for sent.
func (c *corkConn) uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	if len(c.buf) == 0 || c.err != nil {
		return c.err
	}
	_, err := c.Conn.Write(c.buf)
	c.buf = c.buf[:0]
	if cap(c.buf) > corkBufMax {
		c.buf = nil
	}
	if err != nil {
		c.err = err
		_ = c.Conn.Close()
	}
	return err
}

// sever closes the socket of the latest connection.
func (d *dialer) sever() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sock == nil {
		return errors.New("rabbitmq: no connection")
	}
	return d.sock.Close()
}

// rejectedDeliveryLimit is the delivery limit of a "<queue>.rejected"
// queue: in effect none, but explicit, because RabbitMQ 4 would apply its
// default of 20 to a queue that names none and drop the message (a
// rejected queue has no dead-letter target of its own).
const rejectedDeliveryLimit = 1<<31 - 1

// queueArgs are the declare arguments of queue name: its type, and unless
// it is a rejected queue a dead-letter target (the default exchange,
// routing key name+RejectedSuffix) and, for quorum queues, the delivery
// limit.
func queueArgs(cfg Config, name string) amqp.Table {
	args := amqp.Table{"x-queue-type": cfg.QueueType}
	if cfg.QueueType == QueueClassic {
		args["x-max-priority"] = cfg.MaxPriority
	}
	if strings.HasSuffix(name, RejectedSuffix) {
		if cfg.QueueType == QueueQuorum {
			args["x-delivery-limit"] = rejectedDeliveryLimit
		}
		return args
	}
	args["x-dead-letter-exchange"] = ""
	args["x-dead-letter-routing-key"] = name + RejectedSuffix
	if cfg.QueueType == QueueQuorum && cfg.DeliveryLimit > 0 {
		args["x-delivery-limit"] = cfg.DeliveryLimit
	}
	return args
}

// declare declares the durable queue name on conn, after its rejected
// queue (so that the dead-letter target exists before anything can be
// dead-lettered to it). A queue that exists with other arguments
// (PRECONDITION_FAILED) is used as it is, after a passive declare confirms
// it exists, with a warning naming the arguments it may lack. Each declare
// uses its own channel, since a failed declare closes its channel.
func declare(conn *amqp.Connection, cfg Config, name string) error {
	if !strings.HasSuffix(name, RejectedSuffix) {
		if err := declare(conn, cfg, name+RejectedSuffix); err != nil {
			return err
		}
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: declare %s: open channel: %w", name, err)
	}
	args := queueArgs(cfg, name)
	_, err = ch.QueueDeclare(name, true, false, false, false, args)
	if err == nil {
		return ch.Close()
	}
	var aerr *amqp.Error
	if !errors.As(err, &aerr) || aerr.Code != amqp.PreconditionFailed {
		return fmt.Errorf("rabbitmq: declare %s: %w", name, err)
	}
	ch, err = conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: declare %s: open channel: %w", name, err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclarePassive(name, true, false, false, false, nil); err != nil {
		return fmt.Errorf("rabbitmq: declare %s: %w", name, err)
	}
	cfg.Logger.Warn("rabbitmq: queue exists with other arguments; using it as it is. "+
		"Without a delivery limit and a dead-letter target RabbitMQ 4 drops a message delivered 20 times: "+
		"apply them with a policy or redeclare the queue (README: Upgrading an existing RabbitMQ queue)",
		slog.String("queue", name), slog.String("wanted_arguments", formatArgs(args)), slog.String("broker_said", aerr.Reason))
	return nil
}

// formatArgs lists declare arguments as k=v, sorted.
func formatArgs(args amqp.Table) string {
	var kv []string
	for k, v := range args {
		kv = append(kv, fmt.Sprintf("%s=%q", k, fmt.Sprint(v)))
	}
	slices.Sort(kv)
	return strings.Join(kv, " ")
}

// readyCount returns the ready messages of queue with a passive declare on
// a spare channel of conn.
func readyCount(conn *amqp.Connection, queue string) (int, error) {
	ch, err := conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("open channel: %w", err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return 0, err
	}
	return q.Messages, nil
}

// backoff returns the wait before redial attempt n (0-based).
func backoff(cfg Config, n int) time.Duration {
	return ibackoff.Policy{Base: cfg.ReconnectMin, Max: cfg.ReconnectMax}.Exp(n)
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
