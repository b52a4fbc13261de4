// Package transport is the small interface llmq uses to talk to a message
// broker, with one adapter per broker in the sub-packages kafka, rabbitmq and
// memory. Every adapter passes the conformance suite in transporttest, which
// declares the features each one guarantees.
//
// Delivery is at-least-once: a message is handed out by Consume and stays
// owned by the consumer until it is acked. A message not acked when the
// consumer goes away (Close, a crash, a lost connection) is delivered again.
package transport

import (
	"context"
	"errors"
	"time"
)

// Message is one job message and its broker metadata.
type Message struct {
	// Key is the Kafka key (the producer uses the job id, or the tenant);
	// empty on RabbitMQ.
	Key []byte
	// Value is the job's JSON wire form.
	Value []byte
	// Headers are broker headers (Kafka headers, AMQP table of strings).
	Headers map[string]string
	// Priority is 0 (low) .. 9 (high); RabbitMQ maps it to the message
	// priority property; Kafka ignores it.
	Priority uint8
	// ReplyTo and CorrelationID are where the job's result event goes
	// and what it is correlated by: RabbitMQ's reply_to and
	// correlation_id properties, read by the subscriber and written by
	// the publisher; Kafka carries neither (a job names its results topic
	// in its reply_to field).
	ReplyTo, CorrelationID string
	// ID, when set, is the message's id: RabbitMQ's message_id property
	// (a result event's event id); Kafka ignores it.
	ID string

	// Source names where the message came from, for dead letters:
	// "topic/partition/offset" or "queue/delivery-tag".
	Source string
	// Redelivered is true when the message was handed out before: always
	// after a Nack; after a restart or reconnect when the broker knows
	// (RabbitMQ's redelivered flag; Kafka cannot tell and says false).
	Redelivered bool
	// ReceivedAt is when the consumer got the message.
	ReceivedAt time.Time

	// Rejected is set on a message the broker gave up delivering: it was
	// delivered more times than the queue's delivery limit and the broker
	// dead-lettered it (RabbitMQ: to "<queue>.rejected", which the
	// subscriber consumes too; memory: Config.DeliveryLimit). It holds the
	// broker's reason, "delivery_limit" (RabbitMQ also says "rejected",
	// "expired" or "maxlen" for messages a policy dead-lettered). Such a
	// message is not work to do: the consumer records it as a dead letter
	// and acks it. Empty for an ordinary delivery.
	Rejected string
	// RejectedCount is, on a rejected message, how many times the broker
	// rejected it from its queue (RabbitMQ's x-death count): 1 the first
	// time, more when a replay of it was rejected again; 0 when unknown.
	RejectedCount int

	ack  func(ctx context.Context) error
	nack func(ctx context.Context) error
}

// RejectedDeliveryLimit is Message.Rejected for a message delivered more
// times than its queue's delivery limit.
const RejectedDeliveryLimit = "delivery_limit"

// NewMessage builds a delivered message whose Ack and Nack call the given
// functions. Adapters use it; producers build a plain Message literal.
func NewMessage(m Message, ack, nack func(ctx context.Context) error) *Message {
	m.ack, m.nack = ack, nack
	return &m
}

// Ack tells the broker the message is done and must not come back. On Kafka
// the commit may be delayed until every earlier offset of the partition is
// acked (only the contiguous acked prefix is committed). Ack returns
// ErrClosed when the subscriber was closed and ErrStaleDelivery when the
// delivery was lost to a reconnect or rebalance; in both cases the message
// comes back.
func (m *Message) Ack(ctx context.Context) error {
	if m.ack == nil {
		return errors.New("transport: ack of a message that was not delivered")
	}
	return m.ack(ctx)
}

// Nack gives the message back: it is handed out again at once, with
// Redelivered set, however often it is nacked (RabbitMQ requeues it; Kafka
// hands it out again from memory and commits nothing past its offset until
// it is acked). Nack never settles a message: only Ack does. It returns
// the same errors as Ack.
func (m *Message) Nack(ctx context.Context) error {
	if m.nack == nil {
		return errors.New("transport: nack of a message that was not delivered")
	}
	return m.nack(ctx)
}

// Publisher sends messages to a named destination (topic or queue).
type Publisher interface {
	// Publish sends msgs to dest and returns once the broker confirmed all of
	// them (Kafka acks from all replicas, RabbitMQ publisher confirms).
	Publish(ctx context.Context, dest string, msgs ...Message) error
	Close() error
}

// Subscriber hands out the messages of one topic or queue.
type Subscriber interface {
	// Consume delivers messages on the returned channel until ctx is done
	// or Close is called; then the channel is closed. At most prefetch
	// messages are outstanding (delivered and not yet acked or nacked).
	// Consume may be called once per Subscriber (ErrConsuming otherwise);
	// a lost broker connection is re-established inside, it does not close
	// the channel. When ctx ends, fetching stops but messages already
	// handed out can still be acked until Close (graceful shutdown: cancel,
	// finish and ack in-flight work, then Close).
	Consume(ctx context.Context) (<-chan *Message, error)
	// Depth reports the messages waiting: Kafka consumer-group lag (high
	// watermark minus committed offset over all partitions), RabbitMQ ready
	// plus the messages this subscriber holds unacked (AMQP does not report
	// other consumers' unacked messages), memory ready plus unacked.
	Depth(ctx context.Context) (int64, error)
	Close() error
}

// Replier publishes result events to the destinations jobs named (a
// reply queue, a results topic); Publisher of the RabbitMQ and Kafka
// adapters implement it (docs/design/notifications.md).
type Replier interface {
	// Reply sends msgs to dest and returns once the broker confirmed all
	// of them. Unlike Publish it creates and declares nothing: a
	// destination the broker cannot route to is an error wrapping
	// ErrUnroutable (the reply queue is gone, or not there yet), so the
	// caller tries again later rather than lose the message.
	Reply(ctx context.Context, dest string, msgs ...Message) error
}

// SizeLimiter is implemented by a Publisher that knows the largest message
// its broker takes (Kafka's max.message.bytes), so a producer can refuse a
// message that would be rejected before it records or sends anything.
type SizeLimiter interface {
	// MaxValueBytes is the largest Value the broker takes in a message
	// with m's Key and Headers (m.Value is ignored).
	MaxValueBytes(m Message) int
}
