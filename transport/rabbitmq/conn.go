package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// dialer opens AMQP connections and remembers the socket of the latest one,
// so tests can sever it the way a network failure would.
type dialer struct {
	cfg Config

	mu   sync.Mutex
	sock net.Conn
}

func (d *dialer) dial() (*amqp.Connection, error) {
	conn, err := amqp.DialConfig(d.cfg.URL, amqp.Config{
		Heartbeat: 10 * time.Second,
		Locale:    "en_US",
		Dial: func(network, addr string) (net.Conn, error) {
			c, err := net.DialTimeout(network, addr, d.cfg.DialTimeout)
			if err != nil {
				return nil, err
			}
			d.mu.Lock()
			d.sock = c
			d.mu.Unlock()
			return c, nil
		},
	})
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: dial: %w", err)
	}
	return conn, nil
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

// queueArgs are the declare arguments for the configured queue type.
func queueArgs(cfg Config) amqp.Table {
	if cfg.QueueType == QueueClassic {
		return amqp.Table{"x-queue-type": QueueClassic, "x-max-priority": cfg.MaxPriority}
	}
	return amqp.Table{"x-queue-type": QueueQuorum}
}

// declare declares the durable queue name on conn. A queue that exists with
// other arguments (PRECONDITION_FAILED) is accepted as it is, after a
// passive declare confirms it exists. Each declare uses its own channel,
// since a failed declare closes its channel.
func declare(conn *amqp.Connection, cfg Config, name string) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: declare %s: open channel: %w", name, err)
	}
	_, err = ch.QueueDeclare(name, true, false, false, false, queueArgs(cfg))
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
	cfg.Logger.Info("rabbitmq: queue exists with other arguments; using it as it is", "queue", name, "queue_type", cfg.QueueType)
	return nil
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
	d := cfg.ReconnectMin
	for range n {
		d *= 2
		if d >= cfg.ReconnectMax {
			return cfg.ReconnectMax
		}
	}
	return d
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
