package kafka_test

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/kafka"
	"github.com/llmq/llmq/transport/kafka/kafkatest"
)

// lossyCluster is a one-broker kfake cluster that persists to disk, so it
// can be stopped and started again on the same port with its topics, logs
// and committed offsets.
type lossyCluster struct {
	t    *testing.T
	dir  string
	port int
	c    *kfake.Cluster
}

func newLossyCluster(t *testing.T) *lossyCluster {
	l := &lossyCluster{t: t, dir: t.TempDir()}
	l.start()
	_, port, err := net.SplitHostPort(l.c.ListenAddrs()[0])
	require.NoError(t, err)
	l.port, err = strconv.Atoi(port)
	require.NoError(t, err)
	t.Cleanup(l.stop)
	return l
}

func (l *lossyCluster) start() {
	opts := []kfake.Opt{
		kfake.NumBrokers(1), kfake.DataDir(l.dir), kfake.DefaultNumPartitions(2),
		kfake.GroupMinSessionTimeout(kafka.EmbeddedMinSessionTimeout), kfake.AllowAutoTopicCreation(),
	}
	if l.port != 0 {
		opts = append(opts, kfake.Ports(l.port))
	}
	c, err := kfake.NewCluster(opts...)
	require.NoError(l.t, err)
	l.c = c
}

func (l *lossyCluster) stop() { l.c.Close() } // a second Close is a no-op

func (l *lossyCluster) addrs() []string {
	return []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(l.port))}
}

// The broker goes away with messages delivered and unacked, and comes back
// on the same address: publishing fails while it is gone instead of
// hanging, then works again; the subscriber rejoins on its own and
// resumes after the offsets committed before the loss, so every message is
// acked and the committed ones are not delivered again.
func TestBrokerLossAndReturn(t *testing.T) {
	if testing.Short() {
		t.Skip("broker loss takes a few seconds")
	}
	t.Parallel()
	l := newLossyCluster(t)
	topic := kafkatest.NewTopic(t, l.addrs(), 2)
	quiet := slog.New(slog.DiscardHandler) // the outage makes the clients complain
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: l.addrs(), Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })
	ctx := context.Background()
	publish := func(ctx context.Context, from, to int) error {
		var msgs []transport.Message
		for i := from; i < to; i++ {
			msgs = append(msgs, transport.Message{Key: []byte(strconv.Itoa(i)), Value: []byte(strconv.Itoa(i))})
		}
		return pub.Publish(ctx, topic, msgs...)
	}
	require.NoError(t, publish(ctx, 0, 10))

	cfg := kafkatest.Config(l.addrs(), topic, "g")
	cfg.Prefetch = 50
	cfg.Logger = quiet
	sub, err := kafka.NewSubscriber(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sub.Close()) })
	ch, err := sub.Consume(ctx)
	require.NoError(t, err)
	for range 10 {
		require.NoError(t, recv(t, ch).Ack(ctx))
	}
	require.Eventually(t, func() bool {
		lag, err := sub.Depth(ctx)
		return err == nil && lag == 0
	}, 10*time.Second, 20*time.Millisecond, "the first ten are committed")
	require.NoError(t, publish(ctx, 10, 12))
	unacked := []*transport.Message{recv(t, ch), recv(t, ch)}

	l.stop()
	down, cancel := context.WithTimeout(ctx, 2*time.Second)
	// The error is no promise that nothing is written: kafka-go keeps the
	// batch and may write it once the broker is back (at least once).
	err = publish(down, 100, 101)
	require.Error(t, err, "publishing to a lost broker fails")
	require.NotErrorIs(t, err, transport.ErrMessageRejected, "an outage is not a refusal of the message")
	cancel()
	for _, m := range unacked {
		_ = m.Ack(ctx) // its commit cannot reach the broker: it may come back
	}

	l.start()
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return publish(ctx, 12, 20) == nil
	}, 30*time.Second, 100*time.Millisecond, "publishing works again")

	want := map[string]bool{"100": true} // written or not
	for i := 10; i < 20; i++ {
		want[strconv.Itoa(i)] = true
	}
	missing := map[string]bool{}
	for i := 10; i < 20; i++ {
		missing[strconv.Itoa(i)] = true
	}
	for len(missing) > 0 {
		m := recv(t, ch)
		require.NoError(t, m.Ack(ctx))
		require.True(t, want[string(m.Value)], "message %s: committed before the loss, or never published", m.Value)
		delete(missing, string(m.Value))
	}
	require.Eventually(t, func() bool {
		lag, err := sub.Depth(ctx)
		return err == nil && lag == 0
	}, 20*time.Second, 20*time.Millisecond, "every message is committed")
}
