package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
)

// streamHold is the simulator's hook of TestStreamSeparateProcesses: at
// chunk 3 of its first stream it tells reached and waits for release; at
// chunk 3 of the second it waits for the call to be cut, then tells left.
type streamHold struct {
	mu                     sync.Mutex
	streams                int
	reached, release, left chan struct{}
	reachedCut             chan struct{}
}

func (h *streamHold) hook(ctx context.Context, chunk int) error {
	if chunk != 3 {
		return nil
	}
	h.mu.Lock()
	h.streams++
	n := h.streams
	h.mu.Unlock()
	switch n {
	case 1:
		close(h.reached)
		select {
		case <-h.release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	case 2:
		close(h.reachedCut)
		<-ctx.Done()
		close(h.left)
		return ctx.Err()
	}
	return nil
}

// TestStreamSeparateProcesses: `llmq worker` and `llmq api` as two
// processes on one database and one broker, go-openai as the caller. A
// streamed call's first chunks reach the caller while the provider holds
// the rest (they go from the worker's process to the API's through
// Postgres, docs/design/gateway.md#streaming); the job stores the
// assembled completion. A caller that leaves mid-stream cuts the
// provider's call, and the job fails client_disconnected.
func TestStreamSeparateProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary twice; skipped with -short")
	}
	bin := buildLLMQ(t)
	dbURL := storetest.NewDB(t)
	h := &streamHold{reached: make(chan struct{}), release: make(chan struct{}), left: make(chan struct{}),
		reachedCut: make(chan struct{})}
	free := sync.OnceFunc(func() { close(h.release) })
	sim := upstreamsim.NewTestServer(t, upstreamsim.Config{Seed: 4, APIKeys: []string{"sk-test"},
		Models: map[string]upstreamsim.ModelConfig{"gpt-4o-mini": {}}},
		upstreamsim.WithStreamHook(h.hook), upstreamsim.WithLogger(slog.New(slog.DiscardHandler)))
	t.Cleanup(free) // before the simulator stops
	brokerURL := rabbitmqtest.BrokerURL(rabbitmqtest.NewQueue(t))
	env := append(os.Environ(), "LLMQ_DATABASE_URL="+dbURL, "LLMQ_BROKER="+brokerURL, "LLMQ_CONFIG=",
		"LLMQ_API_KEYS=key-stream:acme")
	run := func(name string, env []string, args ...string) {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		var logs bytes.Buffer
		cmd.Stdout, cmd.Stderr = &logs, &logs
		require.NoError(t, cmd.Start())
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("%s:\n%s", name, logs.String())
			}
		})
	}
	run("worker", append(env, "OPENAI_BASE_URL="+sim.URL, "OPENAI_API_KEY=sk-test"),
		"worker", "--strategy", "retry", "--metrics-listen", "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	run("api", env, "api", "--listen", addr, "--metrics-listen", "")

	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	hc := &http.Client{Transport: transport}
	require.Eventually(t, func() bool {
		resp, err := hc.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, time.Minute, 20*time.Millisecond, "the API did not start")
	cfg := openai.DefaultConfig("key-stream")
	cfg.BaseURL = "http://" + addr + "/v1"
	cfg.HTTPClient = hc
	client := openai.NewClientWithConfig(cfg)
	req := openai.ChatCompletionRequest{Model: "gpt-4o-mini", MaxCompletionTokens: 64, Stream: true,
		StreamOptions: &openai.StreamOptions{IncludeUsage: true},
		Messages:      []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "name three queues"}}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := store.Open(ctx, dbURL)
	require.NoError(t, err)
	defer st.Close()

	s, err := client.CreateChatCompletionStream(ctx, req)
	require.NoError(t, err)
	var content strings.Builder
	for range 2 {
		c, err := s.Recv()
		require.NoError(t, err)
		content.WriteString(c.Choices[0].Delta.Content)
	}
	select {
	case <-h.reached:
	case <-ctx.Done():
		t.Fatal("the simulator never reached chunk 3")
	}
	require.NotEmpty(t, content.String(), "two chunks came while the provider holds the third")
	free()
	var usage *openai.Usage
	for {
		c, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if len(c.Choices) > 0 {
			content.WriteString(c.Choices[0].Delta.Content)
		}
		if c.Usage != nil {
			usage = c.Usage
		}
	}
	s.Close()
	require.NotNil(t, usage, "include_usage: the last chunk holds the usage")
	rec, err := st.Jobs().Get(ctx, "acme", s.Header().Get("X-Llmq-Job-Id"))
	require.NoError(t, err)
	require.Equal(t, llmq.StatusSucceeded, rec.Status)
	var stored openai.ChatCompletionResponse
	require.NoError(t, json.Unmarshal(rec.Result, &stored))
	require.Equal(t, content.String(), stored.Choices[0].Message.Content, "the stored result is the assembled completion")
	require.Equal(t, usage.CompletionTokens, stored.Usage.CompletionTokens)

	// A caller that leaves mid-stream.
	cutCtx, cut := context.WithCancel(ctx)
	s, err = client.CreateChatCompletionStream(cutCtx, req)
	require.NoError(t, err)
	_, err = s.Recv()
	require.NoError(t, err)
	select {
	case <-h.reachedCut:
	case <-ctx.Done():
		t.Fatal("the simulator never reached chunk 3 of the second stream")
	}
	cut()
	s.Close()
	select {
	case <-h.left:
	case <-ctx.Done():
		t.Fatal("the provider's call was not cut")
	}
	id := s.Header().Get("X-Llmq-Job-Id")
	require.Eventually(t, func() bool {
		rec, err := st.Jobs().Get(ctx, "acme", id)
		return err == nil && rec.Status.Terminal()
	}, time.Minute, 20*time.Millisecond)
	rec, err = st.Jobs().Get(ctx, "acme", id)
	require.NoError(t, err)
	require.Equal(t, llmq.StatusFailed, rec.Status)
	require.Equal(t, "client_disconnected", rec.ErrorCode)
}
