package open_test

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/transport/open"
)

func deleteQueue(t *testing.T, target open.Target) {
	conn, err := amqp.Dial(target.AMQPURL)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	_, err = ch.QueueDelete(target.Dest, false, false, false)
	require.NoError(t, err)
}
