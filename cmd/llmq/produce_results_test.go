package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/open"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
	"github.com/llmq/llmq/worker"
)

// TestProduceResultsTo: produce --results-to publishes the jobs with that
// reply queue and writes each job's result event to stdout as a JSON line
// as it arrives (a notifier delivers them once the jobs end), then exits;
// the summary goes to stderr.
func TestProduceResultsTo(t *testing.T) {
	b := setupCLI(t)
	jobs := rabbitmqtest.NewQueue(t)
	replies := rabbitmqtest.NewQueue(t)
	t.Setenv(config.EnvBroker, rabbitmqtest.BrokerURL(jobs))
	pub, _, err := open.Open(b.ctx, rabbitmqtest.BrokerURL(jobs), open.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer pub.Close()
	nt, err := worker.NewNotifier(worker.NotifierConfig{Outbox: b.store.Notifications(), Replier: pub.(transport.Replier),
		Interval: 10 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, nt.Start(b.ctx))
	defer func() { require.NoError(t, nt.Stop(b.ctx)) }()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- execute(ctx, []string{"produce", "--results-to", replies}, strings.NewReader(jobLines(5)), &stdout, &stderr)
	}()
	require.Eventually(t, func() bool { return b.countJobs(t) == 5 }, 20*time.Second, 10*time.Millisecond)
	for i := 1; i <= 5; i++ {
		k := store.Key{Tenant: llmq.DefaultTenant, ID: fmt.Sprintf("p-%d", i)}
		rec, err := b.store.Jobs().Get(b.ctx, k.Tenant, k.ID)
		require.NoError(t, err)
		require.Equal(t, &llmq.Reply{To: replies}, rec.Reply, "published with the reply queue")
		_, err = b.store.Queue().StoreResult(b.ctx, k, store.Result{Response: []byte(`{"id":"r"}`), UsedModel: "gpt-4o-mini"})
		require.NoError(t, err)
	}
	select {
	case c := <-code:
		require.Equal(t, 0, c, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	case <-ctx.Done():
		t.Fatalf("produce did not end: stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	var ids []string
	sc := bufio.NewScanner(strings.NewReader(stdout.String()))
	for sc.Scan() {
		var e llmq.ResultEvent
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e), sc.Text())
		require.Equal(t, llmq.StatusSucceeded, e.Status)
		ids = append(ids, e.JobID)
	}
	sort.Strings(ids)
	require.Equal(t, []string{"p-1", "p-2", "p-3", "p-4", "p-5"}, ids, "one line per job")
	require.Contains(t, stderr.String(), "published: 5\n")
}
