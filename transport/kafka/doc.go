// Package kafka is the Kafka adapter of the transport interfaces, built on
// segmentio/kafka-go.
//
// Subscriber joins a consumer group with kafka-go's ConsumerGroup and, for
// every generation, reads each assigned partition with a partition Reader
// (FetchMessage). Messages finish out of order, so each partition has an
// offset tracker that commits only the contiguous acked prefix, in batches
// every Config.CommitInterval and once more when the generation ends (close
// or rebalance). When a generation ends its trackers are dropped: an Ack
// that arrives later returns transport.ErrStaleDelivery and commits nothing,
// and the new owner of the partition gets every uncommitted message again
// (at-least-once). At most Config.Prefetch messages are outstanding, across
// generations.
//
// kafka-go's group Reader is not used because it hides the generation: with
// it a consumer cannot tell which partitions a rebalance revoked, so it could
// not drop their trackers.
//
// Publisher writes with a kafka-go Writer (RequiredAcks all, 5 ms batch
// timeout, key = Message.Key hashed with murmur2 like the Java client) and
// creates a missing destination topic (for example "<topic>.dlq") on first
// use. Produce batches stay under PublisherConfig.MaxMessageBytes (the
// broker's message.max.bytes, 1 MB by default), which the broker applies
// to a whole batch; Publisher.MaxValueBytes tells how large one message
// may be. A message refused for itself (too large, invalid) makes Publish
// return an error wrapping transport.ErrMessageRejected.
//
// Depth is the consumer group's lag: high watermark minus committed offset
// (or minus the log start when nothing was committed), summed over the
// topic's partitions.
//
// Nack hands the message out again at once from memory (it is not fetched
// again, so no other message is repeated) while its offset stays pending:
// the partition's commits stop at it until a redelivery is acked, so the
// lag stays true and a restart or rebalance meanwhile brings it back. The
// redelivered message comes after messages fetched since: partition order
// is not kept for it.
//
// Config.Security and PublisherConfig.Security carry TLS and SASL (PLAIN,
// SCRAM-SHA-256, SCRAM-SHA-512; NewSASL) to every connection: the group,
// the partition readers, the writer and the lag probe.
//
// Kafka has no message priority: Message.Priority is not transmitted.
package kafka
