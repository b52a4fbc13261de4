package kafkatest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/transport/kafka"
)

// NewCluster starts an embedded cluster with topics seeded (10 partitions
// each) and stops it in t.Cleanup. It returns the broker addresses.
func NewCluster(t testing.TB, topics ...string) []string {
	t.Helper()
	addrs, stop, err := kafka.StartEmbedded(context.Background(), topics...)
	require.NoError(t, err)
	t.Cleanup(stop)
	return addrs
}

var topicSeq atomic.Int64

// NewTopic creates a topic with a name unique to the process and the given
// partition count on the cluster at addrs, and returns its name.
func NewTopic(t testing.TB, addrs []string, partitions int) string {
	t.Helper()
	name := fmt.Sprintf("test-%d-%d", time.Now().UnixNano()%1e9, topicSeq.Add(1))
	tr := &kafkago.Transport{}
	defer tr.CloseIdleConnections()
	client := &kafkago.Client{Addr: kafkago.TCP(addrs...), Timeout: 10 * time.Second, Transport: tr}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, kafka.CreateTopic(ctx, client, name, partitions))
	return name
}

// Config returns a subscriber config for topic with short timeouts: 20 ms
// commits, 2 s sessions, 100 ms heartbeats and fetch waits.
func Config(addrs []string, topic, group string) kafka.Config {
	return kafka.Config{
		Brokers:           addrs,
		Topic:             topic,
		Group:             group,
		CommitInterval:    20 * time.Millisecond,
		SessionTimeout:    2 * time.Second,
		HeartbeatInterval: 100 * time.Millisecond,
		RebalanceTimeout:  2 * time.Second,
		MaxWait:           100 * time.Millisecond,
	}
}
