package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/llmq/llmq/transport"
)

// Publisher publishes persistent messages to queues through the default
// exchange, with publisher confirms. Safe for concurrent use: concurrent
// Publish calls send on one confirm channel in turn and wait for their
// confirms side by side.
type Publisher struct {
	cfg    Config
	log    *slog.Logger
	dialer *dialer

	closeMu sync.RWMutex // Publish holds it shared, Close exclusive
	closed  bool

	mu   sync.Mutex // guards the fields below and sending on ch
	conn *amqp.Connection
	sock *corkConn // conn's socket
	ch   *amqp.Channel
	// chClosed receives the broker's reason when it closes ch.
	chClosed chan *amqp.Error
	declared map[string]bool // queues declared on conn
}

var _ transport.Publisher = (*Publisher)(nil)

// NewPublisher returns a publisher; it connects on the first Publish.
func NewPublisher(cfg Config) (*Publisher, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Publisher{cfg: cfg, log: cfg.Logger, dialer: &dialer{cfg: cfg}}, nil
}

// Publish sends msgs to the queue dest, declaring it on first use, and
// returns once the broker confirmed every one. A lost connection is redialed
// with backoff and the unconfirmed rest is published again, until ctx ends.
func (p *Publisher) Publish(ctx context.Context, dest string, msgs ...transport.Message) error {
	p.closeMu.RLock()
	defer p.closeMu.RUnlock()
	if p.closed {
		return fmt.Errorf("rabbitmq: publish to %s: %w", dest, transport.ErrClosed)
	}
	for attempt := 0; len(msgs) > 0; {
		n, conn, err := p.publishWindow(ctx, dest, msgs[:min(len(msgs), p.cfg.ConfirmWindow)])
		msgs = msgs[n:]
		if err == nil {
			attempt = 0
			continue
		}
		if ctx.Err() != nil {
			return fmt.Errorf("rabbitmq: publish to %s: %w", dest, errors.Join(ctx.Err(), err))
		}
		if !connLost(err) {
			return fmt.Errorf("rabbitmq: publish to %s: %w", dest, err)
		}
		p.log.Warn("rabbitmq: publish interrupted; reconnecting", slog.String("queue", dest), slog.Any("error", err))
		p.mu.Lock()
		if conn == nil || p.conn == conn {
			p.drop()
		}
		p.mu.Unlock()
		if !sleep(ctx, backoff(p.cfg, attempt)) {
			return fmt.Errorf("rabbitmq: publish to %s: %w", dest, errors.Join(ctx.Err(), err))
		}
		attempt++
	}
	return nil
}

// tooLarge tells the channel exception RabbitMQ raises for a message over
// its max_message_size (406 PRECONDITION_FAILED "message size N is larger
// than configured max size M") from other closes.
func tooLarge(aerr *amqp.Error) bool {
	return aerr != nil && aerr.Code == amqp.PreconditionFailed && strings.Contains(aerr.Reason, "larger than configured max size")
}

// connLost tells a dropped connection (worth a redial: I/O errors, closed
// channels, nacks, connection-level exceptions) from a refusal by the broker
// (a channel exception such as 403 or 404, or a failed dial handshake).
func connLost(err error) bool {
	if errors.Is(err, transport.ErrMessageRejected) {
		return false
	}
	if errors.Is(err, amqp.ErrClosed) || errors.Is(err, errNacked) {
		return true
	}
	var aerr *amqp.Error
	if errors.As(err, &aerr) {
		return aerr.Recover || aerr.Code == amqp.ConnectionForced || aerr.Code == amqp.FrameError
	}
	return true
}

// publishWindow sends msgs with deferred confirms, then waits for all of
// them without holding the send lock. It returns how many leading messages
// were confirmed and the connection used (nil if none).
func (p *Publisher) publishWindow(ctx context.Context, dest string, msgs []transport.Message) (int, *amqp.Connection, error) {
	p.mu.Lock()
	if err := p.ensure(dest); err != nil {
		p.mu.Unlock()
		return 0, nil, err
	}
	conn, ch, chClosed := p.conn, p.ch, p.chClosed
	confirms := make([]*amqp.DeferredConfirmation, 0, len(msgs))
	var sendErr error
	// The window's frames go out in one write.
	p.sock.cork()
	for _, m := range msgs {
		pub := amqp.Publishing{
			DeliveryMode: amqp.Persistent,
			Priority:     m.Priority,
			Body:         m.Value,
		}
		if len(m.Headers) > 0 {
			pub.Headers = make(amqp.Table, len(m.Headers))
			for k, v := range m.Headers {
				pub.Headers[k] = v
			}
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", dest, false, false, pub)
		if err != nil {
			sendErr = err
			break
		}
		confirms = append(confirms, dc)
	}
	if err := p.sock.uncork(); err != nil {
		p.mu.Unlock()
		return 0, conn, fmt.Errorf("rabbitmq: send %d messages: %w", len(confirms), err)
	}
	p.mu.Unlock()
	for i, dc := range confirms {
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			return i, conn, err
		}
		if !ok {
			// A nack, or the channel closed before the confirm: by the
			// broker refusing a message, or with the connection.
			if ch.IsClosed() {
				select {
				case aerr := <-chClosed:
					if tooLarge(aerr) {
						return i, conn, fmt.Errorf("%w: %w", transport.ErrMessageRejected, aerr)
					}
				default:
				}
				return i, conn, amqp.ErrClosed
			}
			return i, conn, errNacked
		}
	}
	return len(confirms), conn, sendErr
}

// ensure connects with confirms enabled and declares dest once per
// connection. p.mu must be held.
func (p *Publisher) ensure(dest string) error {
	if p.conn == nil || p.conn.IsClosed() || p.ch == nil || p.ch.IsClosed() {
		p.drop()
		conn, err := p.dialer.dial()
		if err != nil {
			return err
		}
		ch, err := conn.Channel()
		if err == nil {
			err = ch.Confirm(false)
		}
		if err != nil {
			_ = conn.Close()
			return fmt.Errorf("rabbitmq: open confirm channel: %w", err)
		}
		p.conn, p.sock, p.ch, p.declared = conn, p.dialer.socket(), ch, map[string]bool{}
		p.chClosed = ch.NotifyClose(make(chan *amqp.Error, 1))
	}
	if p.declared[dest] {
		return nil
	}
	if err := declare(p.conn, p.cfg, dest); err != nil {
		return err
	}
	p.declared[dest] = true
	return nil
}

// drop closes the current connection, if any. p.mu must be held.
func (p *Publisher) drop() {
	if p.conn != nil {
		_ = p.conn.Close()
	}
	p.conn, p.sock, p.ch = nil, nil, nil
}

// Close closes the connection; further Publish calls fail with
// transport.ErrClosed. Close is idempotent.
func (p *Publisher) Close() error {
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	p.mu.Lock()
	defer p.mu.Unlock()
	// An error closing a connection that already broke is of no interest:
	// Close only releases it.
	p.drop()
	return nil
}
