package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/memory"
	"github.com/llmq/llmq/transport/open"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
)

// runLLMQ runs the llmq command line with args and returns its output.
func runLLMQ(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func TestDLQCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("Postgres and RabbitMQ")
	}
	t.Setenv("LLMQ_CONFIG", "")
	ctx := context.Background()
	dbURL := storetest.NewDB(t)
	queue := rabbitmqtest.NewQueue(t)
	conn, err := amqp.Dial(rabbitmqtest.URL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	common := []string{"--database-url", dbURL}
	t.Setenv("LLMQ_BROKER", rabbitmqtest.BrokerURL(queue)) // replay's; the other commands take no broker

	// Two dead-lettered jobs of acme and a poison message.
	st, err := store.Open(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(st.Close)
	w, err := dlq.NewWriter(dlq.Config{Store: st.DeadLetters(), Publisher: memory.New().NewPublisher(), Destination: queue})
	require.NoError(t, err)
	for _, id := range []string{"j1", "j2"} {
		msg := []byte(fmt.Sprintf(`{"id":%q,"tenant":"acme","body":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`, id))
		j, err := llmq.Decode(msg, llmq.DecodeOptions{})
		require.NoError(t, err)
		_, err = st.Jobs().Insert(ctx, j)
		require.NoError(t, err)
		recs, err := st.Queue().Claim(ctx, store.ClaimRequest{Model: "m", Owner: "w", Lease: time.Minute, Limit: 1})
		require.NoError(t, err)
		require.Len(t, recs, 1)
		require.NoError(t, w.DeadLetter(ctx, dlq.Letter{JobID: id, Tenant: "acme", Reason: dlq.ReasonRetriesExhausted,
			LastError: "server_error: 500", Attempts: 8, Message: msg, LeaseToken: recs[0].LeaseToken}))
	}
	require.NoError(t, w.DeadLetter(ctx, dlq.Letter{Reason: dlq.ReasonPoison, LastError: "invalid JSON", Message: []byte("{oops")}))

	out, err := runLLMQ(t, append([]string{"dlq", "ls"}, common...)...)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4, out)
	require.Contains(t, lines[0], "REASON")
	require.Contains(t, lines[1], "poison")

	out, err = runLLMQ(t, append([]string{"dlq", "ls", "--reason", "retries_exhausted", "--tenant", "acme", "--since", "1h", "--limit", "1"}, common...)...)
	require.NoError(t, err)
	require.Contains(t, out, "j2")
	require.NotContains(t, out, "j1")
	require.Contains(t, out, "more: --cursor ")

	// An unknown reason is refused, like jobs ls --status done.
	_, err = runLLMQ(t, append([]string{"dlq", "ls", "--reason", "oops"}, common...)...)
	require.EqualError(t, err, `--reason "oops": want one of poison, retries_exhausted, permanent_error, expired, delivery_limit, model_not_allowed, budget_exceeded, unknown_project, tenant_queue_full`)
	// A missing letter is said once, plainly, and fails.
	_, err = runLLMQ(t, append([]string{"dlq", "show", "99"}, common...)...)
	require.EqualError(t, err, "no dead letter 99")
	out, err = runLLMQ(t, append([]string{"dlq", "replay", "--id", "99"}, common...)...)
	require.EqualError(t, err, "replay: 1 failed: no dead letter 99")
	require.Contains(t, out, "99\tfailed: no such dead letter\n")

	out, err = runLLMQ(t, append([]string{"dlq", "show", "1"}, common...)...)
	require.NoError(t, err)
	require.Contains(t, out, "server_error: 500")
	require.Contains(t, out, `"content": "hi"`)

	// purge without a filter is refused and deletes nothing.
	_, err = runLLMQ(t, append([]string{"dlq", "purge"}, common...)...)
	require.ErrorIs(t, err, dlq.ErrEmptyFilter)
	_, err = runLLMQ(t, append([]string{"dlq", "replay"}, common...)...)
	require.ErrorContains(t, err, "name letters by id or give a filter")

	// replay by filter, twice: one new message per letter.
	out, err = runLLMQ(t, append([]string{"dlq", "replay", "--tenant", "acme"}, common...)...)
	require.NoError(t, err)
	require.Contains(t, out, "replay: 2 replayed, 0 already replayed, 0 failed")
	out, err = runLLMQ(t, append([]string{"dlq", "replay", "1", "--id", "2"}, common...)...)
	require.NoError(t, err)
	require.Contains(t, out, "replay: 0 replayed, 2 already replayed, 0 failed")
	info, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(t, err)
	require.Equal(t, 2, info.Messages)
	for _, id := range []string{"j1", "j2"} {
		rec, err := st.Jobs().Get(ctx, "acme", id)
		require.NoError(t, err)
		require.Equal(t, llmq.StatusQueued, rec.Status)
		require.Equal(t, 0, rec.Attempts)
	}

	out, err = runLLMQ(t, append([]string{"dlq", "purge", "--reason", "poison"}, common...)...)
	require.NoError(t, err)
	require.Contains(t, out, "purge: 1 dead letters deleted")
	out, err = runLLMQ(t, append([]string{"dlq", "purge", "--all"}, common...)...)
	require.NoError(t, err)
	require.Contains(t, out, "purge: 2 dead letters deleted")
}

// TestDLQDrain: drain empties <queue>.dlq, which nothing in llmq consumes.
func TestDLQDrain(t *testing.T) {
	if testing.Short() {
		t.Skip("RabbitMQ")
	}
	t.Setenv("LLMQ_CONFIG", "")
	queue := rabbitmqtest.NewQueue(t)
	pub, _, err := open.Open(context.Background(), rabbitmqtest.BrokerURL(queue+dlq.DLQSuffix), open.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	for i := range 3 {
		require.NoError(t, pub.Publish(context.Background(), queue+dlq.DLQSuffix, transport.Message{Value: []byte(fmt.Sprint(i))}))
	}
	conn, err := amqp.Dial(rabbitmqtest.URL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	depth := func() int {
		info, err := ch.QueueDeclarePassive(queue+dlq.DLQSuffix, true, false, false, false, nil)
		require.NoError(t, err)
		return info.Messages
	}
	require.Equal(t, 3, depth())
	out, err := runLLMQ(t, "dlq", "drain", "--broker", rabbitmqtest.BrokerURL(queue))
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("drain: 3 messages removed from %s.dlq\n", queue), out)
	require.Equal(t, 0, depth())
	_, err = runLLMQ(t, "dlq", "drain", "--broker", "embedded")
	require.ErrorContains(t, err, "retention")
	// With the broker down, the error alone: no "0 messages removed".
	out, err = runLLMQ(t, "dlq", "drain", "--broker", "amqp://guest:guest@127.0.0.1:1/?queue="+queue)
	require.Error(t, err)
	require.Empty(t, out)
}
