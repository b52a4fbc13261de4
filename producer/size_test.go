package producer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/kafka"
	"github.com/llmq/llmq/transport/kafka/kafkatest"
)

// sizedJob is a valid job whose body carries about n bytes of markup.
func sizedJob(id string, n int) *llmq.Job {
	content := strings.Repeat("<p>&amp;</p>", n/12)
	return &llmq.Job{ID: id, Tenant: "acme",
		Body: json.RawMessage(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + content + `"}]}`)}
}

// kafkaBundle is a kfake cluster, a topic of the given partitions and a
// publisher that does not create topics.
type kafkaBundle struct {
	addrs []string
	topic string
	pub   *kafka.Publisher
}

func newKafka(t *testing.T, partitions int, cfg kafka.PublisherConfig) kafkaBundle {
	t.Helper()
	addrs := kafkatest.NewCluster(t)
	cfg.Brokers, cfg.Logger = addrs, quiet
	pub, err := kafka.NewPublisher(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })
	return kafkaBundle{addrs: addrs, topic: kafkatest.NewTopic(t, addrs, partitions), pub: pub}
}

// consume returns the next n messages of topic by value's job id, acked.
func (k kafkaBundle) consume(t *testing.T, n int) map[string]*transport.Message {
	t.Helper()
	cfg := kafkatest.Config(k.addrs, k.topic, "g")
	cfg.Logger = quiet
	sub, err := kafka.NewSubscriber(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sub.Close()) })
	ch, err := sub.Consume(context.Background())
	require.NoError(t, err)
	got := map[string]*transport.Message{}
	for len(got) < n {
		m := receive(t, ch)
		got[mustDecode(t, m).ID] = m
		require.NoError(t, m.Ack(context.Background()))
	}
	return got
}

// partition is the partition of a delivered Kafka message.
func partition(m *transport.Message) string {
	parts := strings.Split(m.Source, "/")
	return parts[len(parts)-2]
}

// By default one tenant's jobs are keyed by id and spread over the
// partitions; keyed by tenant they share one.
func TestKafkaKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key            producer.KeyBy
		minPartitions  int
		maxPartitions  int
		wantKeyOfJobID func(id string) string
	}{
		{producer.KeyByDefault, 6, 10, func(id string) string { return id }},
		{producer.KeyByTenant, 1, 1, func(string) string { return "acme" }},
	} {
		t.Run(string(tc.key), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			k := newKafka(t, 10, kafka.PublisherConfig{})
			p := b.producer(t, func(c *producer.Config) {
				c.Publisher, c.Destination, c.DepthProbe, c.KeyBy = k.pub, k.topic, nil, tc.key
			})
			var jobs []*llmq.Job
			for i := range 40 {
				jobs = append(jobs, newJob(fmt.Sprintf("job-%02d", i)))
			}
			_, _, err := p.PublishBatch(context.Background(), jobs)
			require.NoError(t, err)
			partitions := map[string]bool{}
			for id, m := range k.consume(t, len(jobs)) {
				require.Equal(t, tc.wantKeyOfJobID(id), string(m.Key))
				partitions[partition(m)] = true
			}
			require.GreaterOrEqual(t, len(partitions), tc.minPartitions, "partitions used: %v", partitions)
			require.LessOrEqual(t, len(partitions), tc.maxPartitions)
		})
	}
}

// A job whose encoded message is over MaxMessageBytes is refused with the
// limit before anything is recorded or published; a 600 KB body of markup
// fits the default 1 MiB (HTML is not escaped).
func TestTooLargeRefusedBeforeRecording(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.producer(t, func(c *producer.Config) { c.MaxMessageBytes = 4096 })
	ctx := context.Background()
	_, _, err := p.PublishBatch(ctx, []*llmq.Job{newJob("fits"), sizedJob("big", 5000)})
	var je *producer.JobError
	require.ErrorAs(t, err, &je)
	require.Equal(t, 1, je.Index)
	require.Equal(t, "big", je.ID)
	var tl *llmq.TooLargeError
	require.ErrorAs(t, err, &tl)
	require.Equal(t, 4096, tl.Limit)
	require.Greater(t, tl.Size, 5000)
	for _, id := range []string{"fits", "big"} {
		_, err = b.store.Jobs().Get(ctx, "acme", id)
		require.ErrorIs(t, err, store.ErrNotFound, id)
	}
	require.Zero(t, b.broker.Depth(b.dest))

	r, _, err := b.producer(t, nil).Publish(ctx, sizedJob("markup", 600<<10))
	require.NoError(t, err)
	require.True(t, r.Published)
}

// On Kafka the broker's own limit applies when it is lower than
// MaxMessageBytes: the job is refused with that limit, before recording.
func TestTooLargeForTheBroker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	k := newKafka(t, 1, kafka.PublisherConfig{})
	p := b.producer(t, func(c *producer.Config) {
		c.Publisher, c.Destination, c.DepthProbe, c.MaxMessageBytes = k.pub, k.topic, nil, -1
	})
	j := sizedJob("big", 2<<20)
	_, _, err := p.Publish(context.Background(), j)
	var tl *llmq.TooLargeError
	require.ErrorAs(t, err, &tl)
	require.Equal(t, k.pub.MaxValueBytes(transport.Message{Key: []byte("big")}), tl.Limit)
	_, err = b.store.Jobs().Get(context.Background(), "acme", "big")
	require.ErrorIs(t, err, store.ErrNotFound)
}

// A recorded job the broker refuses is dead-lettered by the sweeper, which
// publishes the rows around it (they shared its refused batch) instead of
// stopping at it. A row over the producer's own limit is dead-lettered
// without a publish.
func TestSweepDeadLettersUnpublishable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The publisher believes the broker takes 4 MiB; kfake takes 1 MB, so
	// the 2 MB job passes the producer's check and the broker refuses it.
	k := newKafka(t, 1, kafka.PublisherConfig{MaxMessageBytes: 4 << 20})
	ctx := context.Background()
	jobs := []*llmq.Job{newJob("ok-1"), sizedJob("refused", 2<<20), newJob("ok-2"), sizedJob("over-limit", 3<<20), newJob("ok-3")}
	for _, j := range jobs {
		require.NoError(t, j.Normalize())
		require.NoError(t, j.Validate())
		_, err := b.store.Outbox().InsertOutbox(ctx, []store.NewJob{{Job: j}})
		require.NoError(t, err)
		b.clock.Advance(time.Millisecond) // swept in this order
	}
	b.clock.Advance(time.Hour)
	cfg := func(c *producer.Config) {
		c.Publisher, c.Destination, c.DepthProbe, c.MaxMessageBytes = k.pub, k.topic, nil, 2<<20+4096
	}

	// Without DeadLetters the sweep stops at the refused row.
	n, err := b.producer(t, cfg).Sweep(ctx, time.Minute, 10)
	require.ErrorIs(t, err, producer.ErrUnpublishable)
	require.Zero(t, n)

	w, err := dlq.NewWriter(dlq.Config{Store: b.store.DeadLetters(), Publisher: k.pub, Destination: k.topic, Clock: b.clock})
	require.NoError(t, err)
	p := b.producer(t, func(c *producer.Config) { cfg(c); c.DeadLetters = w })
	n, err = p.Sweep(ctx, time.Minute, 10)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	got := k.consume(t, 3)
	require.Len(t, got, 3)
	for _, id := range []string{"ok-1", "ok-2", "ok-3"} {
		require.Contains(t, got, id)
		require.NotNil(t, publishedAt(t, b.pool, id), id)
	}
	for id, cause := range map[string]string{"refused": "rejected by the broker", "over-limit": "byte limit"} {
		rec, err := b.store.Jobs().Get(ctx, "acme", id)
		require.NoError(t, err)
		require.Equal(t, llmq.StatusDeadLettered, rec.Status, id)
		letters, _, err := b.store.DeadLetters().ListDeadLetters(ctx, store.DeadLetterListOptions{DeadLetterFilter: store.DeadLetterFilter{Tenant: "acme", JobID: id}})
		require.NoError(t, err)
		require.Len(t, letters, 1, id)
		require.Equal(t, string(producer.ReasonUnpublishable), letters[0].Reason)
		require.Contains(t, letters[0].LastError, cause)
	}
	n, err = p.Sweep(ctx, time.Minute, 10)
	require.NoError(t, err)
	require.Zero(t, n, "nothing is left to sweep")
}
