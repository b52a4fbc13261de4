package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

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
	// returned holds the ids of mandatory messages the broker returned
	// on ch (unroutable replies), until their Reply reads them.
	returned *returns
}

// returns collects the message ids of the broker's basic.return frames.
// RabbitMQ sends a return before the confirm of the same message, and
// amqp091 hands frames on in order, so a Reply that saw its confirms
// finds its returns here.
type returns struct {
	c   <-chan amqp.Return // buffered; drained by take
	mu  sync.Mutex
	ids map[string]bool
}

// take reports whether the message id was returned, reading the returns
// that arrived so far.
func (r *returns) take(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for drained := false; !drained; {
		select {
		case ret := <-r.c:
			r.ids[ret.MessageId] = true
		default:
			drained = true
		}
	}
	ok := r.ids[id]
	delete(r.ids, id)
	return ok
}

var (
	_ transport.Publisher = (*Publisher)(nil)
	_ transport.Replier   = (*Publisher)(nil)
)

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
	return p.publish(ctx, dest, false, msgs)
}

// Reply sends msgs to the reply queue dest (a job's reply_to) through the
// default exchange, as mandatory messages, without declaring dest: a
// reply queue belongs to its consumer (often exclusive or auto-delete,
// with arguments of its own). A message the broker returns as unroutable
// fails the call with transport.ErrUnroutable. Each message needs an ID.
// A direct reply-to (a client's channel) takes them without the flag once
// the client is found there (docs/design/notifications.md, On the bus).
// A call whose ctx ends before its confirms closes the connection (the
// next call dials again): the returns it would have read must not be
// left to stall the connection or be dropped.
func (p *Publisher) Reply(ctx context.Context, dest string, msgs ...transport.Message) error {
	for _, m := range msgs {
		if m.ID == "" {
			return fmt.Errorf("rabbitmq: reply to %s: a reply needs a message id", dest)
		}
	}
	return p.publish(ctx, dest, true, msgs)
}

func (p *Publisher) publish(ctx context.Context, dest string, reply bool, msgs []transport.Message) error {
	p.closeMu.RLock()
	defer p.closeMu.RUnlock()
	if p.closed {
		return fmt.Errorf("rabbitmq: publish to %s: %w", dest, transport.ErrClosed)
	}
	for attempt := 0; len(msgs) > 0; {
		n, conn, err := p.publishWindow(ctx, dest, reply, msgs[:min(len(msgs), p.cfg.ConfirmWindow)])
		msgs = msgs[n:]
		if err == nil {
			attempt = 0
			continue
		}
		if ctx.Err() != nil {
			if reply {
				// A reply window given up before its confirms leaves its
				// returns unread: enough of them fill returned's buffer and
				// stall the connection's reader, every later confirm behind.
				// Closed at once: a close handshake would wait on the broker
				// that did not confirm, with p.mu held.
				p.mu.Lock()
				if conn != nil && p.conn == conn {
					_ = conn.CloseDeadline(time.Now())
					p.drop()
				}
				p.mu.Unlock()
			}
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
	if errors.Is(err, transport.ErrMessageRejected) || errors.Is(err, transport.ErrUnroutable) {
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
func (p *Publisher) publishWindow(ctx context.Context, dest string, reply bool, msgs []transport.Message) (int, *amqp.Connection, error) {
	p.mu.Lock()
	if err := p.ensure(dest, !reply); err != nil {
		p.mu.Unlock()
		return 0, nil, err
	}
	conn, ch, chClosed, returned := p.conn, p.ch, p.chClosed, p.returned
	mandatory := reply && !strings.HasPrefix(dest, directReplyPrefix)
	if reply && !mandatory {
		if err := replyClientThere(conn, dest); err != nil {
			p.mu.Unlock()
			return 0, conn, err
		}
	}
	confirms := make([]*amqp.DeferredConfirmation, 0, len(msgs))
	var sendErr error
	// The window's frames go out in one write.
	p.sock.cork()
	for _, m := range msgs {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", dest, mandatory, false, publishing(m))
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
	// A reply the broker returned fails the window, but the window's
	// confirms are all read and their returns taken: a return left unread
	// would keep its id in returned for the life of the connection.
	unroutable := -1
	sent := func(i int) int { // the messages confirmed before the failure
		if unroutable >= 0 {
			return unroutable
		}
		return i
	}
	for i, dc := range confirms {
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			return sent(i), conn, err
		}
		if !ok {
			// A nack, or the channel closed before the confirm: by the
			// broker refusing a message, or with the connection.
			if ch.IsClosed() {
				select {
				case aerr := <-chClosed:
					if tooLarge(aerr) {
						return sent(i), conn, fmt.Errorf("%w: %w", transport.ErrMessageRejected, aerr)
					}
				default:
				}
				return sent(i), conn, amqp.ErrClosed
			}
			return sent(i), conn, errNacked
		}
		if mandatory && returned.take(msgs[i].ID) && unroutable < 0 {
			unroutable = i
		}
	}
	if unroutable >= 0 {
		return unroutable, conn, fmt.Errorf("rabbitmq: reply to %s: %w", dest, transport.ErrUnroutable)
	}
	return len(confirms), conn, sendErr
}

// publishing is m as a persistent AMQP message.
func publishing(m transport.Message) amqp.Publishing {
	pub := amqp.Publishing{
		DeliveryMode:  amqp.Persistent,
		Priority:      m.Priority,
		Body:          m.Value,
		ReplyTo:       m.ReplyTo,
		CorrelationId: m.CorrelationID,
		MessageId:     m.ID,
	}
	if len(m.Headers) > 0 {
		pub.Headers = make(amqp.Table, len(m.Headers))
		for k, v := range m.Headers {
			pub.Headers[k] = v
		}
	}
	return pub
}

// directReplyPrefix begins the names RabbitMQ gives the reply_to of a
// message published by a client consuming amq.rabbitmq.reply-to.
const directReplyPrefix = "amq.rabbitmq.reply-to."

// replyClientThere reports, by a passive declare of the direct reply-to
// dest on a channel of its own (RabbitMQ answers it while the client's
// channel is open, and closes the channel with 404 once it is not),
// whether the client is still there: transport.ErrUnroutable when not.
func replyClientThere(conn *amqp.Connection, dest string) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: reply to %s: open channel: %w", dest, err)
	}
	defer ch.Close()
	_, err = ch.QueueDeclarePassive(dest, false, false, false, false, nil)
	var aerr *amqp.Error
	if errors.As(err, &aerr) && aerr.Code == amqp.NotFound {
		return fmt.Errorf("rabbitmq: reply to %s: the client is gone: %w", dest, transport.ErrUnroutable)
	}
	if err != nil {
		return fmt.Errorf("rabbitmq: reply to %s: %w", dest, err)
	}
	return nil
}

// ensure connects with confirms enabled and, when declare is set,
// declares dest once per connection. p.mu must be held.
func (p *Publisher) ensure(dest string, declareDest bool) error {
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
		// A return not read when the buffer is full would stall the
		// channel: replies are sent at most ConfirmWindow at a time.
		p.returned = &returns{c: ch.NotifyReturn(make(chan amqp.Return, p.cfg.ConfirmWindow+1)), ids: map[string]bool{}}
	}
	if !declareDest || p.declared[dest] {
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
