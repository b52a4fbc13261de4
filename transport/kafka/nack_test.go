package kafka_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/transport"
)

func waitLag(t *testing.T, s interface {
	Depth(context.Context) (int64, error)
}, want int64) {
	t.Helper()
	var got int64
	var err error
	require.Eventually(t, func() bool {
		got, err = s.Depth(context.Background())
		return err == nil && got == want
	}, 10*time.Second, 10*time.Millisecond, "lag: want %d, last %d (%v)", want, got, err)
}

// A nacked message is handed out again at once, from the same offset; the
// commit point stops at that offset (lag 7 of 10 on one partition) until
// the redelivery is acked, then the lag is 0. A member that leaves with the
// message still unacked hands it to the next one with everything after it.
func TestNackRedeliversInPlace(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	b.publish(t, 10)
	ctx := context.Background()
	sub1, ch1 := b.subscribe(t, "g", 10)
	var held *transport.Message
	for want := range 10 {
		m := recv(t, ch1)
		require.Equal(t, strconv.Itoa(want), string(m.Value))
		if want == 3 {
			held = m
			continue
		}
		require.NoError(t, m.Ack(ctx))
	}
	require.NoError(t, held.Nack(ctx))
	for range 2 {
		m := recv(t, ch1)
		require.Equal(t, "3", string(m.Value))
		require.Equal(t, fmt.Sprintf("%s/0/3", b.topic), m.Source)
		require.True(t, m.Redelivered)
		waitLag(t, sub1, 7)
		require.NoError(t, m.Nack(ctx))
	}
	m := recv(t, ch1)
	require.Equal(t, "3", string(m.Value))
	require.NoError(t, m.Ack(ctx))
	waitLag(t, sub1, 0)

	// Nacked and never acked: the next member starts at its offset.
	b.publish(t, 2) // offsets 10 and 11, values 0 and 1
	first, second := recv(t, ch1), recv(t, ch1)
	require.Equal(t, []string{"0", "1"}, []string{string(first.Value), string(second.Value)})
	require.NoError(t, first.Nack(ctx))
	require.NoError(t, second.Ack(ctx))
	require.NoError(t, sub1.Close())
	_, ch2 := b.subscribe(t, "g", 10)
	var got []string
	for range 2 {
		m := recv(t, ch2)
		got = append(got, m.Source)
		require.NoError(t, m.Ack(ctx))
	}
	require.Equal(t, []string{b.topic + "/0/10", b.topic + "/0/11"}, got)
}
