package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/kafka"
	"github.com/llmq/llmq/transport/kafka/kafkatest"
)

type bundle struct {
	addrs []string
	topic string
	pub   *kafka.Publisher
}

func setup(t *testing.T, partitions int) bundle {
	t.Helper()
	addrs := kafkatest.NewCluster(t)
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: addrs})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })
	return bundle{addrs: addrs, topic: kafkatest.NewTopic(t, addrs, partitions), pub: pub}
}

func (b bundle) publish(t *testing.T, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var msgs []transport.Message
	for i := range n {
		msgs = append(msgs, transport.Message{Key: []byte(strconv.Itoa(i % 97)), Value: []byte(strconv.Itoa(i))})
	}
	require.NoError(t, b.pub.Publish(ctx, b.topic, msgs...))
}

// subscribe consumes b's topic as group, with prefetch, and the test
// config changed by opts.
func (b bundle) subscribe(t *testing.T, group string, prefetch int, opts ...func(*kafka.Config)) (*kafka.Subscriber, <-chan *transport.Message) {
	t.Helper()
	cfg := kafkatest.Config(b.addrs, b.topic, group)
	cfg.Prefetch = prefetch
	for _, o := range opts {
		o(&cfg)
	}
	s, err := kafka.NewSubscriber(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	ch, err := s.Consume(context.Background())
	require.NoError(t, err)
	return s, ch
}

func recv(t *testing.T, ch <-chan *transport.Message) *transport.Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		require.True(t, ok, "channel closed")
		return m
	case <-time.After(15 * time.Second):
		require.FailNow(t, "no message")
		return nil
	}
}

// An ack behind a gap is not committed: after a restart everything from the
// first unacked offset comes back, and nothing before it.
func TestCommitsOnlyContiguousPrefix(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	b.publish(t, 10)
	sub1, ch1 := b.subscribe(t, "g", 10)
	var got []*transport.Message
	for range 10 {
		got = append(got, recv(t, ch1))
	}
	ctx := context.Background()
	for i := len(got) - 1; i >= 0; i-- { // out of order, offset 3 never
		if i != 3 {
			require.NoError(t, got[i].Ack(ctx))
		}
	}
	require.NoError(t, sub1.Close())

	sub2, ch2 := b.subscribe(t, "g", 10)
	lag, err := sub2.Depth(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(7), lag)
	for want := 3; want < 10; want++ {
		m := recv(t, ch2)
		require.Equal(t, strconv.Itoa(want), string(m.Value))
		require.Equal(t, fmt.Sprintf("%s/0/%d", b.topic, want), m.Source)
		require.NoError(t, m.Ack(ctx))
	}
	require.NoError(t, sub2.Close())
	probe, err := kafka.NewSubscriber(kafkatest.Config(b.addrs, b.topic, "g"))
	require.NoError(t, err)
	defer probe.Close()
	lag, err = probe.Depth(ctx)
	require.NoError(t, err)
	require.Zero(t, lag)
}

// A second member joining mid-stream takes partitions away from the first:
// acks of revoked deliveries are stale, their messages are redelivered, and
// every message is acked by someone in the end.
func TestRebalance(t *testing.T) {
	if testing.Short() {
		t.Skip("rebalance takes a few seconds")
	}
	t.Parallel()
	const n = 2000
	b := setup(t, 10)
	b.publish(t, n)
	ctx := context.Background()

	var mu sync.Mutex
	acked := map[string]int{}
	stale := 0
	consume := func(ch <-chan *transport.Message, stop <-chan struct{}) {
		for {
			select {
			case m, ok := <-ch:
				if !ok {
					return
				}
				err := m.Ack(ctx)
				mu.Lock()
				switch {
				case err == nil:
					acked[string(m.Value)]++
				case errors.Is(err, transport.ErrStaleDelivery):
					stale++
				default:
					t.Errorf("ack: %v", err)
				}
				mu.Unlock()
			case <-stop:
				return
			}
		}
	}
	done := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) == n
	}

	sub1, ch1 := b.subscribe(t, "g", 50)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// The first member holds 50 messages unacked until the second joins.
	var held []*transport.Message
	for range 50 {
		held = append(held, recv(t, ch1))
	}
	sub2, ch2 := b.subscribe(t, "g", 50)
	wg.Add(1)
	go func() { defer wg.Done(); consume(ch2, stop) }()
	// sub2 gets its first message only after the rebalance, so sub1's
	// generation has ended by then: every held ack is stale.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) > 0
	}, 15*time.Second, 10*time.Millisecond)
	for _, m := range held {
		require.ErrorIs(t, m.Ack(ctx), transport.ErrStaleDelivery)
	}
	wg.Add(1)
	go func() { defer wg.Done(); consume(ch1, stop) }()
	require.Eventually(t, done, 30*time.Second, 10*time.Millisecond)
	close(stop)
	wg.Wait()
	require.Zero(t, stale, "stale acks beyond the held ones")
	for i := range n {
		require.GreaterOrEqual(t, acked[strconv.Itoa(i)], 1)
	}
	require.Eventually(t, func() bool {
		l1, err1 := sub1.Depth(ctx)
		l2, err2 := sub2.Depth(ctx)
		return err1 == nil && err2 == nil && l1 == 0 && l2 == 0
	}, 10*time.Second, 20*time.Millisecond)
}

func TestDepthOfMissingTopic(t *testing.T) {
	t.Parallel()
	addrs := kafkatest.NewCluster(t)
	s, err := kafka.NewSubscriber(kafkatest.Config(addrs, "never-published", "g"))
	require.NoError(t, err)
	defer s.Close()
	lag, err := s.Depth(context.Background())
	require.NoError(t, err)
	require.Zero(t, lag)
}

// A rebalance ends the generation between commits: its final commit sends
// the acked prefix, so the partition resumes at the first unacked offset
// (whichever member gets it), the acks behind the gap are redelivered, and
// a late ack of the old delivery is stale.
func TestRebalanceCommitsAckedPrefix(t *testing.T) {
	if testing.Short() {
		t.Skip("rebalance takes a few seconds")
	}
	t.Parallel()
	b := setup(t, 1)
	b.publish(t, 10)
	ctx := context.Background()
	cfg := kafkatest.Config(b.addrs, b.topic, "g")
	cfg.Prefetch = 10
	cfg.CommitInterval = time.Hour // only the generation's final commit runs
	sub1, err := kafka.NewSubscriber(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sub1.Close()) })
	ch1, err := sub1.Consume(ctx)
	require.NoError(t, err)
	var held *transport.Message
	for want := range 10 {
		m := recv(t, ch1)
		require.Equal(t, strconv.Itoa(want), string(m.Value))
		if want == 5 {
			held = m
			continue
		}
		require.NoError(t, m.Ack(ctx))
	}
	lag, err := sub1.Depth(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(10), lag, "nothing committed before the generation ends")

	sub2, ch2 := b.subscribe(t, "g", 10)
	got := make([]string, 0, 5)
	for len(got) < 5 {
		var m *transport.Message
		select {
		case m = <-ch1:
		case m = <-ch2:
		case <-time.After(15 * time.Second):
			require.FailNow(t, "no redelivery", "got %v", got)
		}
		got = append(got, string(m.Value))
		require.NoError(t, m.Ack(ctx))
	}
	require.Equal(t, []string{"5", "6", "7", "8", "9"}, got, "resumed at the first unacked offset")
	require.ErrorIs(t, held.Ack(ctx), transport.ErrStaleDelivery)
	// Whichever member acked them, its generation's commit sends them:
	// sub1 leaving ends every generation.
	require.NoError(t, sub1.Close())
	require.Eventually(t, func() bool {
		lag, err := sub2.Depth(ctx)
		return err == nil && lag == 0
	}, 10*time.Second, 20*time.Millisecond)
	select {
	case m := <-ch2:
		require.FailNow(t, "redelivered again", string(m.Value))
	default:
	}
}
