package rabbitmq

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/llmq/llmq/transport"
)

// Subscriber consumes one queue with manual acks, reconnecting when the
// connection drops.
type Subscriber struct {
	cfg    Config
	log    *slog.Logger
	dialer *dialer
	tag    string
	// slots is the prefetch semaphore: one token per outstanding message.
	slots chan struct{}

	mu        sync.Mutex // guards the fields below
	conn      *amqp.Connection
	ch        *amqp.Channel
	epoch     uint64 // bumped on every new connection
	closeErr  chan *amqp.Error
	unacked   int64 // outstanding messages of this subscriber
	acks      acks  // the acks of the current channel not yet sent
	consuming bool
	closed    bool
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

var _ transport.Subscriber = (*Subscriber)(nil)

// NewSubscriber returns a subscriber to cfg.Queue; it connects on Consume
// (or on the first Depth).
func NewSubscriber(cfg Config) (*Subscriber, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Queue == "" {
		return nil, fmt.Errorf("rabbitmq: Config.Queue is required for a subscriber")
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Subscriber{
		cfg:    cfg,
		log:    cfg.Logger.With(slog.String("queue", cfg.Queue)),
		dialer: &dialer{cfg: cfg},
		tag:    "llmq-" + hex.EncodeToString(b[:]),
		slots:  make(chan struct{}, cfg.Prefetch),
	}, nil
}

// Consume connects, declares the queue and delivers its messages. The first
// connection must succeed; later drops are redialed in the background.
func (s *Subscriber) Consume(ctx context.Context) (<-chan *transport.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, fmt.Errorf("rabbitmq: consume %s: %w", s.cfg.Queue, transport.ErrClosed)
	case s.consuming:
		return nil, fmt.Errorf("rabbitmq: consume %s: %w", s.cfg.Queue, transport.ErrConsuming)
	}
	ds, err := s.connectLocked()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: consume %s: %w", s.cfg.Queue, err)
	}
	s.consuming = true
	ctx, s.cancel = context.WithCancel(ctx)
	out := make(chan *transport.Message)
	s.wg.Add(1)
	go s.run(ctx, ds, out)
	s.acks.wake = make(chan struct{}, 1)
	s.wg.Add(1)
	go s.sendAcks(ctx, s.acks.wake)
	return out, nil
}

// rejectedPrefetch is the QoS prefetch of the consumer of the rejected
// queue: its messages are rare and each is one dead letter to record.
const rejectedPrefetch = 8

// deliveries are the delivery channels of one connection: the queue's, and
// its rejected queue's (nil when the queue is itself a rejected queue).
type deliveries struct {
	jobs, rejected <-chan amqp.Delivery
}

// connectLocked dials, declares the queue, sets QoS and starts consuming.
// s.mu must be held.
func (s *Subscriber) connectLocked() (deliveries, error) {
	conn, err := s.dialer.dial()
	if err != nil {
		return deliveries{}, err
	}
	ds, ch, err := s.setup(conn)
	if err != nil {
		_ = conn.Close()
		return deliveries{}, err
	}
	if s.conn != nil {
		_ = s.conn.Close()
	}
	s.conn, s.ch = conn, ch
	s.closeErr = conn.NotifyClose(make(chan *amqp.Error, 1))
	s.epoch++
	s.acks.reset() // a new channel numbers its deliveries from 1; the old one's acks died with it
	return ds, nil
}

// setup declares the queue (and its rejected queue) on conn and consumes
// both on one channel, each with its own prefetch (QoS applies to the
// consumers started after it).
func (s *Subscriber) setup(conn *amqp.Connection) (deliveries, *amqp.Channel, error) {
	if err := declare(conn, s.cfg, s.cfg.Queue); err != nil {
		return deliveries{}, nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return deliveries{}, nil, fmt.Errorf("open channel: %w", err)
	}
	if err := ch.Qos(s.cfg.Prefetch, 0, false); err != nil {
		return deliveries{}, nil, fmt.Errorf("qos: %w", err)
	}
	var ds deliveries
	if ds.jobs, err = ch.Consume(s.cfg.Queue, s.tag, false, false, false, false, nil); err != nil {
		return deliveries{}, nil, fmt.Errorf("consume: %w", err)
	}
	if s.rejectedQueue() == "" {
		return ds, ch, nil
	}
	if err := ch.Qos(min(s.cfg.Prefetch, rejectedPrefetch), 0, false); err != nil {
		return deliveries{}, nil, fmt.Errorf("qos: %w", err)
	}
	if ds.rejected, err = ch.Consume(s.rejectedQueue(), s.tag+RejectedSuffix, false, false, false, false, nil); err != nil {
		return deliveries{}, nil, fmt.Errorf("consume %s: %w", s.rejectedQueue(), err)
	}
	return ds, ch, nil
}

// rejectedQueue is the queue the consumed queue dead-letters to; "" when
// the consumed queue is a rejected queue itself.
func (s *Subscriber) rejectedQueue() string {
	if strings.HasSuffix(s.cfg.Queue, RejectedSuffix) {
		return ""
	}
	return s.cfg.Queue + RejectedSuffix
}

// run forwards deliveries to out and redials when the channel closes under
// it, until ctx ends.
func (s *Subscriber) run(ctx context.Context, ds deliveries, out chan<- *transport.Message) {
	defer s.wg.Done()
	defer close(out)
	for {
		if !s.forward(ctx, ds, out) {
			return
		}
		s.mu.Lock()
		closeErr := s.closeErr
		s.mu.Unlock()
		var reason error = errors.New("consumer cancelled by the broker")
		select {
		case aerr, ok := <-closeErr:
			if ok && aerr != nil {
				reason = aerr
			}
		default:
		}
		s.log.Warn("rabbitmq: connection lost; reconnecting", slog.Any("error", reason))
		var ok bool
		if ds, ok = s.reconnect(ctx); !ok {
			return
		}
		s.log.Info("rabbitmq: reconnected")
	}
}

// forward hands deliveries of both consumers out until ctx ends (false)
// or a delivery channel closes because the connection dropped (true).
func (s *Subscriber) forward(ctx context.Context, ds deliveries, out chan<- *transport.Message) bool {
	s.mu.Lock()
	epoch, ch := s.epoch, s.ch
	s.mu.Unlock()
	for {
		var d amqp.Delivery
		var ok, rejected bool
		select {
		case d, ok = <-ds.jobs:
		case d, ok = <-ds.rejected:
			rejected = true
		case <-ctx.Done():
			s.stopConsuming(ch, ds, epoch)
			return false
		}
		if !ok {
			return true
		}
		select {
		case s.slots <- struct{}{}:
		case <-ctx.Done():
			s.giveBack(d, epoch)
			s.stopConsuming(ch, ds, epoch)
			return false
		}
		s.mu.Lock()
		s.unacked++
		if epoch == s.epoch {
			s.acks.received(d.DeliveryTag)
		}
		s.mu.Unlock()
		select {
		case out <- s.message(d, epoch, rejected):
		case <-ctx.Done():
			_ = s.settle(&settleState{}, d, epoch, false)
			s.stopConsuming(ch, ds, epoch)
			return false
		}
	}
}

// stopConsuming cancels the AMQP consumers and gives back what the broker
// had already pushed, keeping the channel open for acks of handed-out
// messages.
func (s *Subscriber) stopConsuming(ch *amqp.Channel, ds deliveries, epoch uint64) {
	if err := ch.Cancel(s.tag, false); err != nil {
		return // the channel is gone and the broker requeues by itself
	}
	if ds.rejected != nil {
		if err := ch.Cancel(s.tag+RejectedSuffix, false); err != nil {
			return
		}
	}
	for _, c := range []<-chan amqp.Delivery{ds.jobs, ds.rejected} {
		if c == nil {
			continue
		}
		for d := range c {
			s.giveBack(d, epoch)
		}
	}
}

// giveBack requeues a delivery that was never handed out, and records it
// settled so that the acks after it can be sent together.
func (s *Subscriber) giveBack(d amqp.Delivery, epoch uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if epoch == s.epoch {
		s.acks.nacked(d.DeliveryTag)
	}
	_ = d.Nack(false, true)
}

// reconnect redials with backoff until it succeeds (the new deliveries,
// true) or ctx ends (false).
func (s *Subscriber) reconnect(ctx context.Context) (deliveries, bool) {
	for attempt := 0; ; attempt++ {
		if !sleep(ctx, backoff(s.cfg, attempt)) {
			return deliveries{}, false
		}
		s.mu.Lock()
		ds, err := s.connectLocked()
		s.mu.Unlock()
		if err == nil {
			return ds, true
		}
		s.log.Warn("rabbitmq: reconnect failed", slog.Int("attempt", attempt+1), slog.Any("error", err))
	}
}

// settleState makes the first Ack or Nack of a message the only one.
type settleState struct{ settled bool }

// Headers RabbitMQ adds to a dead-lettered message; a rejected message
// carries what they say in Message.Rejected and RejectedCount instead.
var deathHeaders = []string{"x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason",
	"x-last-death-exchange", "x-last-death-queue", "x-last-death-reason"}

func (s *Subscriber) message(d amqp.Delivery, epoch uint64, rejected bool) *transport.Message {
	queue := s.cfg.Queue
	if rejected {
		queue = s.rejectedQueue()
	}
	m := transport.Message{
		Value:         d.Body,
		Priority:      d.Priority,
		ReplyTo:       d.ReplyTo,
		CorrelationID: d.CorrelationId,
		ID:            d.MessageId,
		Source:        fmt.Sprintf("%s/%d", queue, d.DeliveryTag),
		Redelivered:   d.Redelivered,
		ReceivedAt:    time.Now(),
	}
	h := d.Headers
	if rejected {
		m.Rejected, m.RejectedCount = death(h, s.cfg.Queue)
		h = maps.Clone(h)
		for _, k := range deathHeaders {
			delete(h, k)
		}
	}
	if len(h) > 0 {
		m.Headers = make(map[string]string, len(h))
		for k, v := range h {
			if str, ok := v.(string); ok {
				m.Headers[k] = str
			} else {
				m.Headers[k] = fmt.Sprint(v)
			}
		}
	}
	st := &settleState{}
	return transport.NewMessage(m,
		func(context.Context) error { return s.settle(st, d, epoch, true) },
		func(context.Context) error { return s.settle(st, d, epoch, false) })
}

// death reads why and how often a message was dead-lettered from queue: the
// reason ("delivery_limit", "rejected", "expired", "maxlen") and count of
// its x-death entry for queue (the newest entry when none names it), and
// "unknown" when the header is missing.
func death(h amqp.Table, queue string) (reason string, count int) {
	entries, _ := h["x-death"].([]any)
	var found amqp.Table
	for _, e := range entries {
		t, ok := e.(amqp.Table)
		if !ok {
			continue
		}
		if found == nil {
			found = t
		}
		if q, _ := t["queue"].(string); q == queue {
			found = t
			break
		}
	}
	reason, _ = found["reason"].(string)
	switch n := found["count"].(type) {
	case int64:
		count = int(n)
	case int32:
		count = int(n)
	case int:
		count = n
	}
	return cmp.Or(reason, "unknown"), count
}

// settle acks d, or nacks it with requeue, and frees its prefetch slot.
func (s *Subscriber) settle(st *settleState, d amqp.Delivery, epoch uint64, ack bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.settled {
		return nil
	}
	st.settled = true
	s.unacked--
	<-s.slots
	switch {
	case s.closed:
		return fmt.Errorf("rabbitmq: settle %s/%d: %w", s.cfg.Queue, d.DeliveryTag, transport.ErrClosed)
	case epoch != s.epoch:
		return fmt.Errorf("rabbitmq: settle %s/%d: %w", s.cfg.Queue, d.DeliveryTag, transport.ErrStaleDelivery)
	}
	if ack {
		if s.ch == nil || s.ch.IsClosed() {
			// The broker requeues what the lost channel held.
			return fmt.Errorf("rabbitmq: settle %s/%d: %w", s.cfg.Queue, d.DeliveryTag, transport.ErrStaleDelivery)
		}
		s.acks.acked(d.DeliveryTag)
		if s.acks.wake == nil {
			return s.flushAcksLocked() // the sender has stopped: this ack goes now
		}
		select {
		case s.acks.wake <- struct{}{}:
		default: // the sender is already woken: it takes this ack too
		}
		return nil
	}
	s.acks.nacked(d.DeliveryTag)
	if err := d.Nack(false, true); err != nil {
		// Ack and Nack fail only when the channel or its socket is gone,
		// and then the broker requeues the message.
		return fmt.Errorf("rabbitmq: settle %s/%d: %w: %w", s.cfg.Queue, d.DeliveryTag, transport.ErrStaleDelivery, err)
	}
	return nil
}

// sendAcks sends the acks settle records, each time it is woken, until
// ctx ends; the acks recorded after that are sent by settle itself.
func (s *Subscriber) sendAcks(ctx context.Context, wake <-chan struct{}) {
	defer s.wg.Done()
	for {
		select {
		case <-wake:
		case <-ctx.Done():
			s.mu.Lock()
			defer s.mu.Unlock()
			s.acks.wake = nil
			_ = s.flushAcksLocked()
			return
		}
		s.mu.Lock()
		if err := s.flushAcksLocked(); err != nil {
			s.log.Debug("rabbitmq: acks lost with the channel; the broker redelivers them", slog.Any("error", err))
		}
		s.mu.Unlock()
	}
}

// flushAcksLocked sends the recorded acks on the current channel. s.mu
// must be held.
func (s *Subscriber) flushAcksLocked() error {
	if s.ch == nil {
		return nil
	}
	upTo, single := s.acks.take()
	if upTo > 0 {
		if err := s.ch.Ack(upTo, true); err != nil {
			return fmt.Errorf("rabbitmq: ack %s up to %d: %w: %w", s.cfg.Queue, upTo, transport.ErrStaleDelivery, err)
		}
	}
	for _, tag := range single {
		if err := s.ch.Ack(tag, false); err != nil {
			return fmt.Errorf("rabbitmq: ack %s/%d: %w: %w", s.cfg.Queue, tag, transport.ErrStaleDelivery, err)
		}
	}
	return nil
}

// Depth returns the queue's ready messages plus the messages this
// subscriber holds unacked.
func (s *Subscriber) Depth(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("rabbitmq: depth of %s: %w", s.cfg.Queue, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, fmt.Errorf("rabbitmq: depth of %s: %w", s.cfg.Queue, transport.ErrClosed)
	}
	if s.conn == nil || s.conn.IsClosed() {
		if s.consuming {
			return 0, fmt.Errorf("rabbitmq: depth of %s: %w", s.cfg.Queue, amqp.ErrClosed)
		}
		conn, err := s.dialer.dial()
		if err != nil {
			return 0, fmt.Errorf("rabbitmq: depth of %s: %w", s.cfg.Queue, err)
		}
		s.conn = conn
	}
	ready, err := readyCount(s.conn, s.cfg.Queue)
	var aerr *amqp.Error
	if errors.As(err, &aerr) && aerr.Code == amqp.NotFound {
		return s.unacked, nil
	}
	if err != nil {
		return 0, fmt.Errorf("rabbitmq: depth of %s: %w", s.cfg.Queue, err)
	}
	return int64(ready) + s.unacked, nil
}

// Close stops consuming and closes the connection; the broker requeues
// every unacked message. Close is idempotent.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.conn != nil {
		// The broker requeues the unacked messages whether this close
		// handshake succeeds or the socket just drops.
		_ = s.conn.Close()
	}
	return nil
}
