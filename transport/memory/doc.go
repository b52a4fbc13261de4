// Package memory is an in-process message broker behind the transport
// interfaces, for unit tests and llmq's embedded mode.
//
// A Broker holds named queues. Every message published to a queue is handed
// to exactly one of the queue's subscribers (competing consumers), highest
// Priority first and in publish order within a priority. A subscriber holds
// at most Prefetch unacked messages; a message nacked, or still unacked when
// its subscriber closes, goes back to its place in the queue and is delivered
// again with Redelivered set. With Config.DeliveryLimit, a message handed
// back more often than the limit is delivered from then on with
// Message.Rejected set, as RabbitMQ dead-letters it to the rejected queue.
// A message keeps its reply properties (ReplyTo, CorrelationID, ID), and
// the Publisher is a transport.Replier: a reply reaches a queue that
// exists (consumed, or published to) and fails with ErrUnroutable
// otherwise, as on RabbitMQ. Nothing survives the process.
package memory
