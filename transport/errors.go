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
