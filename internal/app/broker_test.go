package app_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/app"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
)

// TestBrokerWrongPassword: a wrong RabbitMQ password is said to be one, at
// start-up, without the password.
func TestBrokerWrongPassword(t *testing.T) {
	if testing.Short() {
		t.Skip("RabbitMQ")
	}
	t.Parallel()
	s := settings(t)
	b, err := config.ParseBroker(strings.Replace(rabbitmqtest.BrokerURL(rabbitmqtest.NewQueue(t)), "guest:guest@", "guest:Wr0ngPW@", 1))
	require.NoError(t, err)
	s.Broker = b
	_, err = app.New(context.Background(), app.Config{Settings: s, Producer: true, Logger: quiet})
	require.ErrorIs(t, err, app.ErrBrokerAuth)
	require.Contains(t, err.Error(), "authentication failure")
	require.NotContains(t, err.Error(), "Wr0ngPW")
	require.NotContains(t, err.Error(), "deadline exceeded")
}

// lockedBuffer collects log output written from other goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestBrokerDownAtStart: an API started while its broker is down retries
// with backoff, logging why, and starts once the broker answers; a one-shot
// command fails at once.
func TestBrokerDownAtStart(t *testing.T) {
	if testing.Short() {
		t.Skip("RabbitMQ")
	}
	t.Parallel()
	// A port where nothing listens yet; later a proxy to RabbitMQ.
	hold, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := hold.Addr().String()
	require.NoError(t, hold.Close())
	s := settings(t)
	url := strings.Replace(rabbitmqtest.BrokerURL(rabbitmqtest.NewQueue(t)), "127.0.0.1:5672", addr, 1)
	require.Contains(t, url, addr)
	b, err := config.ParseBroker(url)
	require.NoError(t, err)
	s.Broker = b

	_, err = app.New(context.Background(), app.Config{Settings: s, Producer: true, Logger: quiet})
	require.ErrorIs(t, err, app.ErrBrokerUnavailable, "produce does not wait")

	var logs lockedBuffer
	clk := clockwork.NewFakeClock()
	done := make(chan error, 1)
	var a *app.App
	go func() {
		var err error
		a, err = app.New(context.Background(), app.Config{Settings: s, Clock: clk,
			Logger: slog.New(slog.NewTextHandler(&logs, nil)), API: &app.APIConfig{Listen: "127.0.0.1:0"}})
		done <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, wait := range []time.Duration{app.BrokerRetryMin, 2 * app.BrokerRetryMin} {
		require.NoError(t, clk.BlockUntilContext(ctx, 1), "a retry waits on the clock")
		require.Contains(t, logs.String(), "broker unavailable at start-up; retrying")
		require.Contains(t, logs.String(), "retry_in="+wait.String())
		require.Contains(t, logs.String(), "connection refused")
		if wait == 2*app.BrokerRetryMin {
			stop := proxy(t, addr, "127.0.0.1:5672") // the broker comes up
			defer stop()
		}
		clk.Advance(wait)
	}
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatalf("New did not return once the broker answered; logs:\n%s", logs.String())
	}
	require.Contains(t, logs.String(), "broker reachable")
	require.NoError(t, a.Stop(context.Background()))
}

// proxy forwards connections from addr to target until stop.
func proxy(t *testing.T, addr, target string) (stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, u)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(u, c); _ = u.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(c, u); _ = c.Close() }()
		}
	}()
	return func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}
}
