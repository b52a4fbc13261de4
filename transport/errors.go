package transport

import "errors"

// ErrClosed is returned by any call on a closed Publisher or Subscriber, and
// by Ack/Nack on a message whose subscriber was closed.
var ErrClosed = errors.New("transport: closed")

// ErrStaleDelivery is returned by Ack/Nack on a message whose delivery is no
// longer owned by this subscriber although the subscriber is still open: the
// RabbitMQ channel it came on was lost (the connection dropped and was
// re-established) or the Kafka partition was revoked by a rebalance. The
// broker delivers such a message again, so the caller treats the error as
// "will be redelivered", not as a failure of its work.
var ErrStaleDelivery = errors.New("transport: delivery is stale (connection lost or partition revoked); it will be redelivered")

// ErrConsuming is returned by a second Consume on the same Subscriber.
var ErrConsuming = errors.New("transport: Consume already called on this subscriber")

// ErrMessageRejected is wrapped by a Publish error when the broker refused a
// message for what it is, so that publishing it again fails the same way:
// Kafka's max.message.bytes (MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, or
// the client's own check) and INVALID_RECORD; RabbitMQ's max_message_size
// (406 PRECONDITION_FAILED). Refusals of every message (authorization, a
// missing topic) are not. When Publish sends several messages, the error
// does not say which: publish them one by one to find out.
var ErrMessageRejected = errors.New("transport: message rejected by the broker")

// ErrUnroutable is wrapped by a Reply error when the broker had nowhere to
// put a message: no queue of that name (RabbitMQ returned it), no such
// topic (Kafka).
var ErrUnroutable = errors.New("transport: no such destination")
