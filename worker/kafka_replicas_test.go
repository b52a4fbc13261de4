package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/kafka/kafkatest"
	"github.com/llmq/llmq/transport/open"
	"github.com/llmq/llmq/worker"
)

// TestReplicasShareOneQuotaOverKafka is TestReplicasShareOneQuota over
// Kafka: one tenant's backlog, published as the producer publishes it
// (keyed by job id, its default), lands on a topic of 4 partitions read by
// a consumer group of three workers that share one API key's quota
// through the ledger. The backlog spreads over every partition, every job
// runs exactly once (one upstream call each, every message committed), and
// the replicas together are refused at most one call.
func TestReplicasShareOneQuotaOverKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("a backlog of about 20 s")
	}
	t.Parallel()
	const partitions, n = 4, 75 // ~31,500 tokens: the bucket, then ~19 s of refill
	tb := setup(t, replicaSim())
	addrs := kafkatest.NewCluster(t)
	topic := kafkatest.NewTopic(t, addrs, partitions)
	url := "kafka://" + strings.Join(addrs, ",") + "/" + topic + "?group=llmq-replicas"
	var subs []transport.Subscriber
	for range 3 {
		_, sub, err := open.Open(context.Background(), url, open.Options{Prefetch: 64, Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		subs = append(subs, sub)
		tb.start(t, func(c *worker.Config) {
			tb.replicaConfig(c)
			c.Subscriber = sub
		})
	}
	require.Eventually(t, func() bool {
		var k int
		err := tb.store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM quota_ledger`).Scan(&k)
		return err == nil && k == 3
	}, 10*time.Second, 20*time.Millisecond)

	pub, _, err := open.Open(context.Background(), url, open.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	ids := make([]string, n)
	msgs := make([]transport.Message, n)
	for i := range n {
		ids[i] = fmt.Sprintf("k-%03d", i)
		j, err := llmq.Decode([]byte(fmt.Sprintf(`{"id":%q,"tenant":"acme","body":{"model":%q,"max_tokens":400,"messages":[{"role":"user","content":"Tell story %s"}]}}`,
			ids[i], replicaModel, ids[i])), llmq.DecodeOptions{})
		require.NoError(t, err)
		msgs[i], err = producer.Message(j, producer.KeyByDefault)
		require.NoError(t, err)
		require.Equal(t, ids[i], string(msgs[i].Key), "keyed by job id by default")
	}
	require.NoError(t, pub.Publish(context.Background(), topic, msgs...))

	// The tenant's backlog spreads over the partitions.
	perPartition := partitionCounts(t, addrs, topic, partitions)
	t.Logf("messages per partition: %v", perPartition)
	var total int64
	for p, c := range perPartition {
		require.GreaterOrEqual(t, c, int64(n/partitions/3), "partition %d holds %d of %d messages", p, c, n)
		total += c
	}
	require.EqualValues(t, n, total)

	recs := map[string]bool{}
	deadline := time.Now().Add(90 * time.Second)
	for len(recs) < n {
		for _, id := range ids {
			if rec, err := tb.store.Jobs().Get(context.Background(), "acme", id); err == nil && rec.Status.Terminal() {
				require.Equal(t, llmq.StatusSucceeded, rec.Status, "%s: %s", id, rec.ErrorMessage)
				recs[id] = true
			}
		}
		require.False(t, time.Now().After(deadline), "%d of %d jobs terminal", len(recs), n)
		time.Sleep(20 * time.Millisecond) // polling an external system; not a correctness wait
	}
	stats := tb.sim.Sim.Stats()
	require.EqualValues(t, n, stats.Total.Succeeded, "one upstream call per job")
	var owners int
	require.NoError(t, tb.store.Pool().QueryRow(context.Background(), `SELECT count(DISTINCT lease_owner) FROM jobs`).Scan(&owners))
	require.Equal(t, 3, owners, "every replica ran jobs")
	calls := stats.Total.Accepted + tb.rateLimited()
	t.Logf("%d calls, %d answered 429", calls, tb.rateLimited())
	require.LessOrEqual(t, tb.rateLimited(), int64(1), "at most one 429 in %d calls", calls)
	for _, sub := range subs {
		waitDrained(t, sub) // every message committed, on every partition
	}
}

// partitionCounts is the number of messages in each partition of topic.
func partitionCounts(t *testing.T, addrs []string, topic string, partitions int) []int64 {
	t.Helper()
	tr := &kafkago.Transport{}
	defer tr.CloseIdleConnections()
	client := &kafkago.Client{Addr: kafkago.TCP(addrs...), Timeout: 10 * time.Second, Transport: tr}
	var reqs []kafkago.OffsetRequest
	for p := range partitions {
		reqs = append(reqs, kafkago.FirstOffsetOf(p), kafkago.LastOffsetOf(p))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := client.ListOffsets(ctx, &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{topic: reqs}})
	require.NoError(t, err)
	out := make([]int64, partitions)
	for _, po := range resp.Topics[topic] {
		require.NoError(t, po.Error)
		out[po.Partition] = po.LastOffset - po.FirstOffset
	}
	return out
}
