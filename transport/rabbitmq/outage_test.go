package rabbitmq_test

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/chaos"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/rabbitmq"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
)

// RabbitMQ goes away (through a proxy the test cuts) with messages held
// unacked, and stays away while the clients redial: publishing fails,
// acks of the lost deliveries are stale, redials are refused. Once it is
// back, the subscriber reconnects on the same channel, every message is
// acked exactly as published, and the queue is empty.
func TestOutage(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("an outage of a second")
	}
	base, err := url.Parse(rabbitmqtest.URL())
	require.NoError(t, err)
	proxy, err := chaos.New(base.Host)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, proxy.Close()) })
	base.Host = proxy.Addr()
	var logs logBuffer
	cfg := rabbitmq.Config{URL: base.String(), ReconnectMin: 20 * time.Millisecond, ReconnectMax: 100 * time.Millisecond,
		DialTimeout: time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	q := rabbitmqtest.NewQueue(t)
	pub, err := rabbitmq.NewPublisher(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })
	cfg.Queue = q
	sub, err := rabbitmq.NewSubscriber(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sub.Close()) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	publish := func(ctx context.Context, from, to int) error {
		var msgs []transport.Message
		for i := from; i < to; i++ {
			msgs = append(msgs, transport.Message{Value: []byte(strconv.Itoa(i))})
		}
		return pub.Publish(ctx, q, msgs...)
	}
	require.NoError(t, publish(ctx, 0, 5))
	out, err := sub.Consume(ctx)
	require.NoError(t, err)
	held := []*transport.Message{<-out, <-out}

	proxy.Cut()
	down, stop := context.WithTimeout(ctx, 500*time.Millisecond)
	require.Error(t, publish(down, 100, 101), "publishing while the broker is away fails")
	stop()
	for _, m := range held {
		require.ErrorIs(t, m.Ack(ctx), transport.ErrStaleDelivery)
	}
	// Messages pushed before the cut are still handed out, stale; then the
	// subscriber notices the loss and redials, refused while the broker
	// is away.
	away := time.After(10 * time.Second)
	for strings.Count(logs.String(), "reconnect failed") < 5 {
		select {
		case m := <-out:
			require.ErrorIs(t, m.Ack(ctx), transport.ErrStaleDelivery)
		case <-time.After(10 * time.Millisecond):
		case <-away:
			require.FailNow(t, "the subscriber does not redial", logs.String())
		}
	}

	proxy.Restore()
	require.NoError(t, publish(ctx, 5, 8))
	acked := map[string]bool{}
	for len(acked) < 8 {
		select {
		case m, ok := <-out:
			require.True(t, ok, "the Consume channel stays open across the outage")
			err := m.Ack(ctx)
			if errors.Is(err, transport.ErrStaleDelivery) {
				continue // handed out from the lost connection: it comes back
			}
			require.NoError(t, err)
			acked[string(m.Value)] = true
		case <-ctx.Done():
			require.FailNow(t, "not every message came back", "acked %v", acked)
		}
	}
	for i := range 8 {
		require.True(t, acked[strconv.Itoa(i)], "message %d", i)
	}
	require.Eventually(t, func() bool {
		d, err := sub.Depth(ctx)
		return err == nil && d == 0
	}, 10*time.Second, 20*time.Millisecond)
}
