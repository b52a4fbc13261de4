package producer_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/open"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
)

func resultMessage(t *testing.T, tenant, id, eventID string) transport.Message {
	t.Helper()
	b, err := json.Marshal(llmq.ResultEvent{Type: llmq.ResultEventType, Version: llmq.ResultEventVersion, EventID: eventID,
		JobID: id, Tenant: tenant, Status: llmq.StatusSucceeded})
	require.NoError(t, err)
	return transport.Message{Key: []byte(id), Value: b, ID: eventID}
}

// TestResultsAwait: on a real reply queue, Await hands out each awaited
// job's event once, in arrival order, skipping duplicates, other jobs'
// events and messages that are no event, and returns once all arrived.
func TestResultsAwait(t *testing.T) {
	t.Parallel()
	queue := rabbitmqtest.NewQueue(t)
	pub, sub, err := open.Open(context.Background(), rabbitmqtest.BrokerURL(queue), open.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer pub.Close()
	defer sub.Close()
	r := pub.(transport.Replier)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, pub.Publish(ctx, queue, transport.Message{Value: []byte("not an event")}))
	require.NoError(t, r.Reply(ctx, queue,
		resultMessage(t, "acme", "a", "e-a"),
		resultMessage(t, "acme", "other", "e-o"),
		resultMessage(t, "acme", "a", "e-a"), // a duplicate delivery
		resultMessage(t, "globex", "b", "e-gb"),
		resultMessage(t, "acme", "b", "e-b"),
	))
	var got []string
	err = producer.NewResults(sub).AwaitKeys(ctx, []producer.ResultKey{{Tenant: "acme", ID: "a"}, {Tenant: "acme", ID: "b"}},
		func(e llmq.ResultEvent) error {
			got = append(got, e.EventID)
			return nil
		})
	require.NoError(t, err)
	require.Equal(t, []string{"e-a", "e-b"}, got)

	short, cancelShort := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancelShort()
	pub2, sub2, err := open.Open(context.Background(), rabbitmqtest.BrokerURL(queue), open.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer pub2.Close()
	defer sub2.Close()
	err = producer.NewResults(sub2).AwaitKeys(short, []producer.ResultKey{{Tenant: "acme", ID: "never"}}, func(llmq.ResultEvent) error { return nil })
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "1 of 1 jobs without a result")
}
