package main

import (
	"context"
	"strings"

	"github.com/llmq/llmq/transport/kafka"
)

// startEmbeddedKafka starts the in-process Kafka cluster (kfake) that
// LLMQ_BROKER=embedded and `llmq demo` use, with topic and its dead-letter
// topic seeded.
func startEmbeddedKafka(ctx context.Context, topic string) ([]string, func(), error) {
	return kafka.StartEmbedded(ctx, topic, topic+".dlq")
}

// embeddedKafkaURL is the broker URL of an embedded cluster.
func embeddedKafkaURL(addrs []string, topic string) string {
	return "kafka://" + strings.Join(addrs, ",") + "/" + topic
}
