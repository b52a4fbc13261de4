package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/tenantroutes"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/kafka"
	"github.com/llmq/llmq/transport/kafka/kafkatest"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
	"github.com/llmq/llmq/worker"
)

// runNotified runs a worker on sub with cfg's routes and a notifier
// replying through r, until the test ends.
func runNotified(t *testing.T, tb *testBundle, sub transport.Subscriber, r transport.Replier, cfg worker.Config) {
	t.Helper()
	cfg.Subscriber, cfg.Store, cfg.DeadLetters = sub, tb.store.Queue(), tb.letters
	cfg.Upstream, cfg.Strategy = upstreamAt(tb.sim.URL, 10*time.Second), shaping.StrategyRetry
	cfg.Logger, cfg.Registerer = slog.New(slog.DiscardHandler), prometheus.NewRegistry()
	w, err := worker.New(cfg)
	require.NoError(t, err)
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(ctx))
	})
	nt, err := worker.NewNotifier(worker.NotifierConfig{Outbox: tb.store.Notifications(), Replier: r,
		Interval: 10 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, nt.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, nt.Stop(context.Background())) })
}

// TestNotifierKafkaResultsTopic: with the deployment's results topic set,
// every job's result event is written there keyed by its job id, with
// the job message's headers echoed and the event id added.
func TestNotifierKafkaResultsTopic(t *testing.T) {
	t.Parallel()
	const n = 30
	tb := setup(t, upstreamsim.Config{Seed: 4, Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: -1, TPM: -1}}})
	addrs := kafkatest.NewCluster(t)
	jobs, results := kafkatest.NewTopic(t, addrs, 4), kafkatest.NewTopic(t, addrs, 2)
	dest, pub, sub := openBroker(t, "kafka://"+strings.Join(addrs, ",")+"/"+jobs, 64)
	runNotified(t, tb, sub, pub.(transport.Replier), worker.Config{ResultsTopic: results})

	rs, err := kafka.NewSubscriber(kafkatest.Config(addrs, results, "results-reader"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = rs.Close() })
	ch, err := rs.Consume(context.Background())
	require.NoError(t, err)

	msgs := make([]transport.Message, n)
	for i := range n {
		id := fmt.Sprintf("k-%02d", i)
		msgs[i] = transport.Message{Key: []byte(id), Value: jobJSON(id, "gpt-4o-mini", ""), Headers: map[string]string{"x-app": "a" + id}}
	}
	require.NoError(t, pub.Publish(context.Background(), dest, msgs...))
	seen := map[string]string{}
	timeout := time.After(time.Minute)
	for len(seen) < n {
		select {
		case m := <-ch:
			var e llmq.ResultEvent
			require.NoError(t, json.Unmarshal(m.Value, &e))
			require.Equal(t, e.JobID, string(m.Key), "keyed by job id")
			require.Equal(t, "a"+e.JobID, m.Headers["x-app"], "headers echoed")
			require.Equal(t, e.EventID, m.Headers[worker.HeaderEventID])
			require.Equal(t, llmq.StatusSucceeded, e.Status)
			if prev, ok := seen[e.JobID]; ok {
				require.Equal(t, prev, e.EventID)
			}
			seen[e.JobID] = e.EventID
			require.NoError(t, m.Ack(context.Background()))
		case <-timeout:
			t.Fatalf("%d of %d result events after a minute", len(seen), n)
		}
	}
}

// TestNotifierReplyReadByAmqpConsume: a reply queue read by amqp-consume
// (librabbitmq's client) gets the job's result event.
func TestNotifierReplyReadByAmqpConsume(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("amqp-consume")
	if err != nil {
		t.Skip("amqp-consume is not installed")
	}
	tb := setup(t, upstreamsim.Config{Seed: 5, Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: -1, TPM: -1}}})
	runNotified(t, tb, tb.subscriber(t, 16), tb.pub.(transport.Replier), worker.Config{})
	queue := rabbitmqtest.NewQueue(t)
	conn, err := amqp.Dial(rabbitmqtest.URL())
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclare(queue, true, false, false, false, nil)
	require.NoError(t, err)

	require.NoError(t, tb.pub.Publish(context.Background(), tb.queue, transport.Message{Value: jobJSON("ac-1", "gpt-4o-mini", ""),
		ReplyTo: queue, CorrelationID: "corr-ac"}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	// librabbitmq reads the path "/" as the vhost "": the default vhost
	// is a URL without a path.
	cmd := exec.CommandContext(ctx, bin, "--url", strings.TrimSuffix(rabbitmqtest.URL(), "/"), "-q", queue, "-c", "1", "cat")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Stdout = &out
	require.NoError(t, cmd.Run(), stderr.String())
	var e llmq.ResultEvent
	require.NoError(t, json.Unmarshal(out.Bytes(), &e), out.String())
	require.Equal(t, "ac-1", e.JobID)
	require.Equal(t, "corr-ac", e.CorrelationID)
	require.Equal(t, llmq.StatusSucceeded, e.Status)
}

// TestNotifierDirectReply: a client on RabbitMQ's direct reply-to (it
// consumes amq.rabbitmq.reply-to and publishes its job on that channel)
// gets the job's result event, and the event leaves the outbox as
// delivered, not to be sent again.
func TestNotifierDirectReply(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 6, Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: -1, TPM: -1}}})
	runNotified(t, tb, tb.subscriber(t, 16), tb.pub.(transport.Replier), worker.Config{})
	conn, err := amqp.Dial(rabbitmqtest.URL())
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	replies, err := ch.Consume("amq.rabbitmq.reply-to", "", true, false, false, false, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, ch.PublishWithContext(ctx, "", tb.queue, false, false, amqp.Publishing{DeliveryMode: amqp.Persistent,
		ReplyTo: "amq.rabbitmq.reply-to", CorrelationId: "corr-d", Body: jobJSON("dr-1", "gpt-4o-mini", "")}))
	m := next(t, replies, "result event")
	var e llmq.ResultEvent
	require.NoError(t, json.Unmarshal(m.Body, &e), string(m.Body))
	require.Equal(t, "dr-1", e.JobID)
	require.Equal(t, "corr-d", m.CorrelationId)
	require.Equal(t, llmq.StatusSucceeded, e.Status)
	require.Eventually(t, func() bool {
		left, err := tb.store.Notifications().List(ctx, store.NotificationFilter{})
		require.NoError(t, err)
		return len(left) == 0
	}, 10*time.Second, 10*time.Millisecond, "delivered: the outbox is empty")
}

// TestNotifierResultsReadByKcat: the results topic read by kcat
// (librdkafka's client) holds each job's result event, keyed by its job id
// with the job's headers echoed.
func TestNotifierResultsReadByKcat(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat is not installed")
	}
	tb := setup(t, upstreamsim.Config{Seed: 7, Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: -1, TPM: -1}}})
	addrs := kafkatest.NewCluster(t)
	jobs, results := kafkatest.NewTopic(t, addrs, 2), kafkatest.NewTopic(t, addrs, 1)
	dest, pub, sub := openBroker(t, "kafka://"+strings.Join(addrs, ",")+"/"+jobs, 16)
	runNotified(t, tb, sub, pub.(transport.Replier), worker.Config{ResultsTopic: results})
	require.NoError(t, pub.Publish(context.Background(), dest,
		transport.Message{Key: []byte("kc-1"), Value: jobJSON("kc-1", "gpt-4o-mini", ""), Headers: map[string]string{"x-app": "kc"}}))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// -c 1: exit after the first message; -J: key, payload and headers as JSON.
	cmd := exec.CommandContext(ctx, bin, "-C", "-b", strings.Join(addrs, ","), "-t", results, "-o", "beginning", "-c", "1", "-J", "-q")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	require.NoError(t, cmd.Run(), stderr.String())
	var m struct {
		Key     string   `json:"key"`
		Payload string   `json:"payload"`
		Headers []string `json:"headers"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &m), out.String())
	var e llmq.ResultEvent
	require.NoError(t, json.Unmarshal([]byte(m.Payload), &e), m.Payload)
	require.Equal(t, "kc-1", m.Key, "keyed by job id")
	require.Equal(t, "kc-1", e.JobID)
	require.Equal(t, llmq.StatusSucceeded, e.Status)
	headers := map[string]string{}
	for i := 0; i+1 < len(m.Headers); i += 2 {
		headers[m.Headers[i]] = m.Headers[i+1]
	}
	require.Equal(t, "kc", headers["x-app"], "headers echoed")
	require.Equal(t, e.EventID, headers[worker.HeaderEventID])
}

// TestNotifierTenantReply: a job that names no reply of its own takes its
// tenant's from the configuration; its message's own reply_to property
// wins over it.
func TestNotifierTenantReply(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 6, Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: -1, TPM: -1}}})
	tenantQ, ds := replyQueue(t)
	ownQ, own := replyQueue(t)
	runNotified(t, tb, tb.subscriber(t, 16), tb.pub.(transport.Replier),
		worker.Config{TenantReplies: worker.StaticTenantReplies{llmq.DefaultTenant: {To: tenantQ}}})
	require.NoError(t, tb.pub.Publish(context.Background(), tb.queue,
		transport.Message{Value: jobJSON("t-1", "gpt-4o-mini", "")},
		transport.Message{Value: jobJSON("t-2", "gpt-4o-mini", ""), ReplyTo: ownQ}))
	var e llmq.ResultEvent
	require.NoError(t, json.Unmarshal(nextReply(t, ds).Body, &e))
	require.Equal(t, "t-1", e.JobID)
	require.NoError(t, json.Unmarshal(nextReply(t, own).Body, &e))
	require.Equal(t, "t-2", e.JobID)
}

// TestNotifierTenantReplyLive: the tenant's route kept as data
// (tenantroutes over store.TenantNotifications) is read at each job: a
// route changed while the worker runs takes the jobs recorded after it.
func TestNotifierTenantReplyLive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tb := setup(t, upstreamsim.Config{Seed: 7, Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: -1, TPM: -1}}})
	firstQ, first := replyQueue(t)
	secondQ, second := replyQueue(t)
	tn := store.NewTenantNotifications(tb.store)
	_, err := tn.Import(ctx, map[string]llmq.Reply{llmq.DefaultTenant: {To: firstQ}}, nil)
	require.NoError(t, err)
	routes, err := tenantroutes.New(tenantroutes.Config{Source: tn, Log: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, routes.Start(ctx))
	t.Cleanup(func() { require.NoError(t, routes.Stop(ctx)) })
	runNotified(t, tb, tb.subscriber(t, 16), tb.pub.(transport.Replier), worker.Config{TenantReplies: routes})

	require.NoError(t, tb.pub.Publish(ctx, tb.queue, transport.Message{Value: jobJSON("l-1", "gpt-4o-mini", "")}))
	var e llmq.ResultEvent
	require.NoError(t, json.Unmarshal(nextReply(t, first).Body, &e))
	require.Equal(t, "l-1", e.JobID)

	_, err = tn.PutRoute(ctx, "ops", llmq.DefaultTenant, llmq.Reply{To: secondQ}, 1)
	require.NoError(t, err)
	// The change reaches the routes by LISTEN/NOTIFY (the backstop reload
	// is 30 s away).
	require.Eventually(t, func() bool {
		r, _ := routes.TenantReply(llmq.DefaultTenant)
		return r.To == secondQ
	}, 10*time.Second, 5*time.Millisecond, "the changed route did not arrive")
	require.NoError(t, tb.pub.Publish(ctx, tb.queue, transport.Message{Value: jobJSON("l-2", "gpt-4o-mini", "")}))
	require.NoError(t, json.Unmarshal(nextReply(t, second).Body, &e))
	require.Equal(t, "l-2", e.JobID)
}

// TestNotifierMemoryReplies: on the in-memory broker a job's result event
// reaches a subscriber of its reply queue, whether the job or its
// message's reply_to and correlation id named it.
func TestNotifierMemoryReplies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tb := setup(t, upstreamsim.Config{Seed: 8, Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: -1, TPM: -1}}})
	name := "notify-" + strings.ReplaceAll(t.Name(), "/", "-")
	dest, pub, sub := openBroker(t, "memory://"+name+"/jobs", 16)
	_, _, replies := openBroker(t, "memory://"+name+"/replies", 16)
	ch, err := replies.Consume(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = replies.Close() })
	runNotified(t, tb, sub, pub.(transport.Replier), worker.Config{})

	require.NoError(t, pub.Publish(ctx, dest,
		transport.Message{Value: jobJSON("m-1", "gpt-4o-mini", `,"reply_to":{"to":"replies"}`)},
		transport.Message{Value: jobJSON("m-2", "gpt-4o-mini", ""), ReplyTo: "replies", CorrelationID: "c-2"}))
	got := map[string]llmq.ResultEvent{}
	for len(got) < 2 {
		select {
		case m := <-ch:
			var e llmq.ResultEvent
			require.NoError(t, json.Unmarshal(m.Value, &e))
			require.Equal(t, e.EventID, m.ID)
			require.Equal(t, e.CorrelationID, m.CorrelationID)
			got[e.JobID] = e
			require.NoError(t, m.Ack(ctx))
		case <-time.After(30 * time.Second):
			t.Fatalf("result events: got %d of 2", len(got))
		}
	}
	require.Equal(t, llmq.StatusSucceeded, got["m-1"].Status)
	require.Equal(t, "c-2", got["m-2"].CorrelationID)
}
