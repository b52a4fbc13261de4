package rabbitmq_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/rabbitmq"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
)

// Acks go together as one multiple ack, but never past a held delivery: the
// acks behind it reach the broker at once (with a prefetch of 2, the broker
// sends a third message only once one of the first two is acked on the
// wire), and the held one comes back when its subscriber closes.
func TestAcksDoNotWaitForAHeldDelivery(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q := rabbitmqtest.NewQueue(t)
	pub := newPublisher(t, rabbitmq.Config{})
	var msgs []transport.Message
	for i := range 4 {
		msgs = append(msgs, transport.Message{Value: []byte(strconv.Itoa(i))})
	}
	require.NoError(t, pub.Publish(ctx, q, msgs...))
	next := func(out <-chan *transport.Message) *transport.Message {
		t.Helper()
		select {
		case m := <-out:
			return m
		case <-ctx.Done():
			require.FailNow(t, "no delivery")
			return nil
		}
	}

	first, err := rabbitmq.NewSubscriber(rabbitmq.Config{URL: rabbitmqtest.URL(), Queue: q, Prefetch: 2})
	require.NoError(t, err)
	out, err := first.Consume(ctx)
	require.NoError(t, err)
	held, m := next(out), next(out)
	require.Equal(t, []string{"0", "1"}, []string{string(held.Value), string(m.Value)})
	require.NoError(t, m.Ack(ctx))
	m = next(out)
	require.Equal(t, "2", string(m.Value), "the ack of 1 reached the broker while 0 is held")
	require.NoError(t, m.Ack(ctx))
	require.NoError(t, first.Close())

	second := newSubscriber(t, rabbitmq.Config{Queue: q})
	out, err = second.Consume(ctx)
	require.NoError(t, err)
	got := map[string]bool{}
	for range 2 {
		m := next(out)
		got[string(m.Value)] = true
		require.NoError(t, m.Ack(ctx))
	}
	require.Equal(t, map[string]bool{"0": true, "3": true}, got, "the held message and the one never handed out come back, and only they")
	require.Eventually(t, func() bool {
		d, err := second.Depth(ctx)
		return err == nil && d == 0
	}, 10*time.Second, 20*time.Millisecond, "every ack reached the broker")
}
