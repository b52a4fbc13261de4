package dlq

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/kafka"
	"github.com/llmq/llmq/transport/kafka/kafkatest"
)

// consumeKafka returns the first message of topic, read by a new group.
func consumeKafka(t *testing.T, addrs []string, topic string) *transport.Message {
	t.Helper()
	sub, err := kafka.NewSubscriber(kafkatest.Config(addrs, topic, "dlq-test-"+topic))
	require.NoError(t, err)
	return first(t, sub, topic)
}

func TestWriterAndReplayOnKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("Kafka round trip (consumer group joins)")
	}
	t.Parallel()
	ctx := context.Background()
	addrs := kafkatest.NewCluster(t, "jobs")
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	st, err := store.Open(ctx, storetest.NewDB(t), store.WithClock(clock))
	require.NoError(t, err)
	t.Cleanup(st.Close)
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: addrs})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })
	cfg := Config{Store: st.DeadLetters(), Publisher: pub, Destination: "jobs", Clock: clock}
	w, err := NewWriter(cfg)
	require.NoError(t, err)
	svc, err := NewService(cfg)
	require.NoError(t, err)

	b := &dlqBundle{ctx: ctx, clock: clock, store: st, leases: map[string]store.Lease{}}
	msg := b.claimedJob(t, "j1")
	require.NoError(t, w.DeadLetter(ctx, b.letter("j1", msg)))

	got := consumeKafka(t, addrs, "jobs.dlq")
	require.Equal(t, msg, got.Value)
	require.Equal(t, []byte("acme"), got.Key)
	require.Equal(t, "retries_exhausted", got.Headers[HeaderReason])
	require.Equal(t, "jobs/3/42", got.Headers[HeaderSource])
	id := got.Headers[HeaderDeadLetterID]

	n, err := strconv.ParseInt(id, 10, 64)
	require.NoError(t, err)
	res, err := svc.Replay(ctx, "acme", n)
	require.NoError(t, err)
	require.True(t, res.Replayed)
	again := consumeKafka(t, addrs, "jobs")
	require.Equal(t, msg, again.Value)
	require.Equal(t, []byte("acme"), again.Key)
	require.Equal(t, id, again.Headers[HeaderReplayOf])
}
