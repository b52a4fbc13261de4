package memory_test

import (
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/memory"
	"github.com/llmq/llmq/transport/transporttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	b := memory.New()
	var n atomic.Int64
	transporttest.Run(t, transporttest.Factory{
		NewDest: func(t *testing.T) string { return "q" + strconv.FormatInt(n.Add(1), 10) },
		NewPublisher: func(t *testing.T) transport.Publisher {
			return b.NewPublisher()
		},
		NewSubscriber: func(t *testing.T, dest, _ string, prefetch int) transport.Subscriber {
			s, err := b.NewSubscriber(dest, memory.Config{Prefetch: prefetch, DeliveryLimit: 3})
			require.NoError(t, err)
			return s
		},
	}, transporttest.Features{
		Key: true, Priority: true, PriorityOrder: true, Redelivered: true,
		ExactRedelivery: true, Depth: true, DeliveryLimit: 3,
		ReplyProperties: true, Reply: true, ReplyUnroutable: true,
	})
}

func TestSharedByName(t *testing.T) {
	require.Same(t, memory.Shared("a"), memory.Shared("a"))
	require.NotSame(t, memory.Shared("a"), memory.Shared("b"))
}

func TestConfigValidate(t *testing.T) {
	_, err := memory.New().NewSubscriber("q", memory.Config{Prefetch: -1})
	require.ErrorContains(t, err, "Prefetch")
}
