package kafka

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Embedded cluster settings.
const (
	// EmbeddedPartitions is the partition count of the topics StartEmbedded
	// seeds and of the topics it creates on demand.
	EmbeddedPartitions = 10
	// EmbeddedMinSessionTimeout is the embedded cluster's minimum group
	// session timeout (kfake's own default is 6 s), so tests can use short
	// sessions.
	EmbeddedMinSessionTimeout = 200 * time.Millisecond
)

// StartEmbedded starts an in-process Kafka cluster (kfake: 3 brokers on
// random 127.0.0.1 ports, data in memory) with topics seeded, for tests and
// `llmq demo`. It returns the broker addresses and a stop function that
// shuts the cluster down.
func StartEmbedded(ctx context.Context, topics ...string) (addrs []string, stop func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("kafka: start embedded cluster: %w", err)
	}
	opts := []kfake.Opt{
		kfake.DefaultNumPartitions(EmbeddedPartitions),
		kfake.GroupMinSessionTimeout(EmbeddedMinSessionTimeout),
		kfake.AllowAutoTopicCreation(),
	}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(EmbeddedPartitions, topics...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka: start embedded cluster: %w", err)
	}
	return c.ListenAddrs(), c.Close, nil
}
