// Package kafkatest starts in-process Kafka clusters (kfake) for tests and
// builds configs with short group timeouts so tests stay fast.
package kafkatest
