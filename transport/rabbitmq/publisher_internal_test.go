package rabbitmq

import (
	"fmt"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/transport"
)

// The refusal of a message over max_message_size is told apart from other
// channel closes, and is not retried. (The local broker's limit is 128 MiB
// and is shared: the test does not send such a message.)
func TestTooLargeIsRejected(t *testing.T) {
	t.Parallel()
	big := &amqp.Error{Code: amqp.PreconditionFailed, Recover: true,
		Reason: "PRECONDITION_FAILED - message size 134217729 is larger than configured max size 134217728"}
	require.True(t, tooLarge(big))
	for _, other := range []*amqp.Error{
		nil,
		{Code: amqp.PreconditionFailed, Recover: true, Reason: "PRECONDITION_FAILED - inequivalent arg 'x-queue-type'"},
		{Code: amqp.AccessRefused, Recover: true, Reason: "ACCESS_REFUSED - write access to queue 'q' refused"},
		{Code: amqp.ConnectionForced, Reason: "CONNECTION_FORCED - broker forced connection closure"},
	} {
		require.False(t, tooLarge(other), "%v", other)
	}
	require.False(t, connLost(fmt.Errorf("%w: %w", transport.ErrMessageRejected, big)), "a refused message is not retried")
	require.True(t, connLost(amqp.ErrClosed))
}
