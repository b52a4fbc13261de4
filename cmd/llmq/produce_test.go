package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport/memory"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
)

// jobLines returns n JSONL jobs with ids p-1..p-n.
func jobLines(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, `{"id":"p-%d","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}}`+"\n", i)
	}
	return b.String()
}

// countJobs counts the jobs recorded.
func (b *cliBundle) countJobs(t *testing.T) int {
	var n int
	require.NoError(t, b.store.Pool().QueryRow(b.ctx, `SELECT count(*) FROM jobs`).Scan(&n))
	return n
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestProduceInterrupted: an interrupt while produce reads stdin prints the
// summary (published, not sent, the line to resume from) and exits 130;
// resuming from that line sends the rest.
func TestProduceInterrupted(t *testing.T) {
	b := setupCLI(t)
	t.Setenv(config.EnvBroker, rabbitmqtest.BrokerURL(rabbitmqtest.NewQueue(t)))
	in, feed := io.Pipe()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	var stdout, stderr syncBuffer
	code := make(chan int, 1)
	go func() { code <- execute(ctx, []string{"produce", "--batch", "10"}, in, &stdout, &stderr) }()
	go func() { _, _ = io.WriteString(feed, jobLines(25)) }() // then stdin stays open
	require.Eventually(t, func() bool { return b.countJobs(t) == 20 }, 20*time.Second, 10*time.Millisecond)
	cancel(signalError{syscall.SIGINT})
	select {
	case c := <-code:
		require.Equal(t, 130, c, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatal("produce did not stop on the interrupt")
	}
	require.NoError(t, feed.Close())
	out := stdout.String()
	require.Contains(t, out, "published: 20\n")
	require.Contains(t, out, "rejected: 0\n")
	// Lines 21-25 were read, or not yet: either way the run resumes at 21.
	require.Contains(t, out, "interrupted: resume from line 21: send the same input to llmq produce --from-line 21\n")
	// The jobs read but not sent, and the input not read, are both told.
	m := regexp.MustCompile(`\nnot sent \(interrupted\): (\d+) jobs? read, and every line after line (\d+), not read\n`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	notSent, _ := strconv.Atoi(m[1])
	last, _ := strconv.Atoi(m[2])
	require.Equal(t, last, 20+notSent, out)
	require.Contains(t, stderr.String(), "llmq: interrupted by interrupt\n")
	require.NotContains(t, stderr.String(), "\r", "no carriage return outside a terminal")

	// Resuming sends the five others, once.
	var again syncBuffer
	require.Equal(t, 0, execute(context.Background(), []string{"produce", "--from-line", "21"},
		strings.NewReader(jobLines(25)), &again, &again), again.String())
	require.Contains(t, again.String(), "published: 5\n")
	require.Equal(t, 25, b.countJobs(t))
}

// TestProduceSIGINT sends a real SIGINT to the built binary in the middle
// of a run.
func TestProduceSIGINT(t *testing.T) {
	b := setupCLI(t)
	bin := buildLLMQ(t)
	queue := rabbitmqtest.NewQueue(t)
	cmd := exec.Command(bin, "produce", "--batch", "10")
	cmd.Env = append(os.Environ(), config.EnvBroker+"="+rabbitmqtest.BrokerURL(queue))
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	feed, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	_, err = io.WriteString(feed, jobLines(15))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return b.countJobs(t) == 10 }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	err = cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	require.Equal(t, 130, ee.ExitCode(), stderr.String())
	out := stdout.String()
	require.Contains(t, out, "published: 10\n")
	require.Contains(t, out, "interrupted: resume from line 11")
	require.Equal(t, 10, b.countJobs(t))
}

func TestProgress(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := newProgress(&buf, 20, func() time.Time { return now })
	s := &produceSummary{reasons: map[string]int{}}

	// Every job rejected, within milliseconds: no rate, no "100%
	// published".
	s.reject(20, "invalid body.model (required)", "")
	now = now.Add(10 * time.Second)
	p.update(20, s)
	require.Equal(t, "line 20/20 (100%): published 0, rejected 20, 0 jobs/s\n", buf.String())

	// A rate over less than a second is not shown.
	buf.Reset()
	q := newProgress(&buf, -1, func() time.Time { return now })
	s = &produceSummary{reasons: map[string]int{}, published: 20}
	now = now.Add(10*time.Second + 5*time.Millisecond)
	q.start = now.Add(-5 * time.Millisecond)
	q.update(20, s)
	require.Equal(t, "line 20: published 20, rejected 0\n", buf.String())
	require.NotContains(t, buf.String(), "\r")

	// Outside a terminal, at most a line every 10 s.
	buf.Reset()
	now = now.Add(time.Second)
	q.update(21, s)
	require.Empty(t, buf.String())
}

// TestProduceRefusesModelsNotAllowed: a line naming a model the
// configuration does not list is rejected, with its line and field.
func TestProduceRefusesModelsNotAllowed(t *testing.T) {
	b := setupCLI(t)
	t.Setenv(config.EnvBroker, rabbitmqtest.BrokerURL(rabbitmqtest.NewQueue(t)))
	cfgPath := t.TempDir() + "/llmq.yaml"
	require.NoError(t, os.WriteFile(cfgPath, []byte("models: {gpt-4o-mini: {}}\n"), 0o600))
	in := jobLines(1) + `{"id":"x","body":{"model":"o3-pro","messages":[{"role":"user","content":"hi"}]}}` + "\n"
	var out syncBuffer
	code := execute(context.Background(), []string{"produce", "--config", cfgPath}, strings.NewReader(in), &out, &out)
	require.Equal(t, 1, code, out.String())
	require.Contains(t, out.String(), "published: 1\n")
	require.Contains(t, out.String(), "1  invalid body.model (model_not_allowed)")
	require.Contains(t, out.String(), `line 2: invalid job: body.model: model "o3-pro" is not one this service runs; allowed: gpt-4o-mini`)
	require.Equal(t, 1, b.countJobs(t))
}

// failingStats fails the first fails QueueStats calls, as a probe over its
// timeout under load does.
type failingStats struct {
	producer.Store
	fails atomic.Int32
}

func (f *failingStats) QueueStats(ctx context.Context, since time.Time, limit int64) (store.QueueStats, error) {
	if f.fails.Add(-1) >= 0 {
		return store.QueueStats{}, errors.New("timeout: context deadline exceeded")
	}
	return f.Store.QueueStats(ctx, since, limit)
}

// TestProduceRetriesWhenTheQueueCannotBeMeasured: a batch refused because
// the queue could not be measured is tried again (after 1 s) and
// published, not rejected; with --wait=false it is rejected.
func TestProduceRetriesWhenTheQueueCannotBeMeasured(t *testing.T) {
	b := setupCLI(t)
	broker := memory.New()
	stats := &failingStats{Store: b.store.Outbox()}
	p, err := producer.New(producer.Config{Publisher: broker.NewPublisher(), Store: stats, Destination: "jobs",
		DepthTTL: -1, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Drain(context.Background())) })
	batch := func(ids ...string) []*llmq.Job {
		var jobs []*llmq.Job
		for _, id := range ids {
			jobs = append(jobs, &llmq.Job{ID: id, Body: json.RawMessage(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`)})
		}
		return jobs
	}

	stats.fails.Store(2)
	sum := &produceSummary{reasons: map[string]int{}}
	rest, _, err := publishLines(b.ctx, p, batch("a", "b"), []int{1, 2}, sum, true, time.Minute, nil)
	require.NoError(t, err)
	require.Empty(t, rest)
	require.Equal(t, produceSummary{published: 2, reasons: map[string]int{}}, *sum)
	require.Equal(t, int32(-1), stats.fails.Load(), "measured three times")

	stats.fails.Store(1)
	sum = &produceSummary{reasons: map[string]int{}}
	_, _, err = publishLines(b.ctx, p, batch("c"), []int{3}, sum, false, time.Minute, nil)
	require.NoError(t, err)
	require.Equal(t, 1, sum.rejected, "--wait=false: rejected")
	require.Equal(t, 2, b.countJobs(t))
}
