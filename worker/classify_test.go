package worker

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	api := func(status int, code any, typ string) error {
		return fmt.Errorf("call: %w", &openai.APIError{HTTPStatusCode: status, Code: code, Type: typ, Message: "m"})
	}
	tests := []struct {
		name     string
		err      error
		provider Provider
		class    Class
		code     string
	}{
		{"success", nil, ProviderOpenAI, ClassSuccess, ""},
		{"rpm 429", api(429, "rate_limit_exceeded", "requests"), ProviderOpenAI, ClassRateLimited, "rate_limit_exceeded"},
		{"tpm 429", api(429, "rate_limit_exceeded", "tokens"), ProviderOpenAI, ClassRateLimited, "rate_limit_exceeded"},
		{"slow_down", api(429, "slow_down", "rate_limit_error"), ProviderOpenAI, ClassRateLimited, "slow_down"},
		{"openai insufficient_quota", api(429, "insufficient_quota", "insufficient_quota"), ProviderOpenAI, ClassPermanent, "insufficient_quota"},
		{"old insufficient_quota with null code", api(429, nil, "insufficient_quota"), ProviderOpenAI, ClassPermanent, "insufficient_quota"},
		{"spend limit", api(429, "project_spend_limit_exceeded", "insufficient_quota"), ProviderOpenAI, ClassPermanent, "project_spend_limit_exceeded"},
		{"dashscope insufficient_quota is TPM", api(429, "insufficient_quota", "insufficient_quota"), ProviderDashScope, ClassRateLimited, "insufficient_quota"},
		{"dashscope burst", api(429, "limit_burst_rate", "limit_burst_rate"), ProviderDashScope, ClassRateLimited, "limit_burst_rate"},
		{"azure numeric-string 429", api(429, "429", ""), ProviderOpenAI, ClassRateLimited, "429"},
		{"500", api(500, nil, "server_error"), ProviderOpenAI, ClassRetryable, "server_error"},
		{"503 overloaded", api(503, "server_is_overloaded", "service_unavailable_error"), ProviderOpenAI, ClassRetryable, "server_is_overloaded"},
		{"502 html", &openai.RequestError{HTTPStatusCode: 502, Err: errors.New("bad gateway")}, ProviderOpenAI, ClassRetryable, "http_502"},
		{"408", &openai.RequestError{HTTPStatusCode: 408}, ProviderOpenAI, ClassRetryable, "http_408"},
		{"400", api(400, "context_length_exceeded", "invalid_request_error"), ProviderOpenAI, ClassPermanent, "context_length_exceeded"},
		{"401", api(401, "invalid_api_key", "invalid_request_error"), ProviderOpenAI, ClassPermanent, "invalid_api_key"},
		{"404", api(404, "model_not_found", "invalid_request_error"), ProviderOpenAI, ClassPermanent, "model_not_found"},
		{"timeout", fmt.Errorf("post: %w", context.DeadlineExceeded), ProviderOpenAI, ClassRetryable, "timeout"},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), ProviderOpenAI, ClassRetryable, "connection_error"},
		{"unknown", errors.New("json: cannot unmarshal"), ProviderOpenAI, ClassPermanent, "client_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := Classify(tt.err, nil, tt.provider)
			require.Equal(t, tt.class, o.Class, o.Class.String())
			require.Equal(t, tt.code, o.Code)
		})
	}
}

func TestBackoffDelay(t *testing.T) {
	t.Parallel()
	b := Backoff{Base: 100 * time.Millisecond, Max: time.Second}.WithDefaults()
	for retry, window := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		window *= time.Millisecond
		for i := 0; i < 200; i++ {
			d := b.Delay(retry, 0, nil)
			require.GreaterOrEqual(t, d, time.Duration(0))
			require.LessOrEqual(t, d, window, "retry %d", retry)
		}
	}
	// The server's advice is a floor, clamped at MaxRetryAfter.
	require.GreaterOrEqual(t, b.Delay(0, 5*time.Second, nil), 5*time.Second)
	require.Equal(t, BackoffMaxRetryAfterDefault, b.Delay(0, time.Hour, nil))
}

func TestRetryBudget(t *testing.T) {
	t.Parallel()
	b := NewRetryBudget(0.5, 2, 3)
	require.True(t, b.Withdraw())
	require.True(t, b.Withdraw())
	require.False(t, b.Withdraw())
	b.Deposit()
	require.False(t, b.Withdraw(), "half a retry is not a retry")
	b.Deposit()
	require.True(t, b.Withdraw())
	for i := 0; i < 100; i++ {
		b.Deposit()
	}
	require.Equal(t, 3.0, b.Balance())
}

func TestSchedulerPriorityAndAging(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	s := NewScheduler[string](10*time.Second, func() time.Time { return now })
	s.Push("low-old", 2)
	now = now.Add(5 * time.Second)
	s.Push("normal", 1)
	s.Push("high", 0)
	s.Push("normal-2", 1)

	pop := func() string {
		v, ok := s.TryPop()
		require.True(t, ok)
		return v
	}
	// low-old has aged 0.5 levels (rank 1.5): behind high and both normals.
	require.Equal(t, "high", pop())
	require.Equal(t, "normal", pop())
	// After 25 s more, low-old is at 2-3.0 = -1.0 and normal-2 at 1-2.5 = -1.5.
	now = now.Add(25 * time.Second)
	require.Equal(t, "normal-2", pop())
	require.Equal(t, "low-old", pop())
	_, ok := s.TryPop()
	require.False(t, ok)

	// A low job waiting long enough overtakes a fresh high one.
	s.Push("low", 2)
	now = now.Add(21 * time.Second)
	s.Push("high-fresh", 0)
	require.Equal(t, "low", pop())
}

func TestSchedulerPopWaits(t *testing.T) {
	t.Parallel()
	s := NewScheduler[int](0, nil)
	got := make(chan int)
	go func() {
		v, err := s.Pop(context.Background())
		if err == nil {
			got <- v
		}
	}()
	s.Push(7, 1)
	select {
	case v := <-got:
		require.Equal(t, 7, v)
	case <-time.After(5 * time.Second):
		t.Fatal("Pop did not return after Push")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Pop(ctx)
	require.ErrorIs(t, err, context.Canceled)
}

func TestDrainEstimate(t *testing.T) {
	t.Parallel()
	require.Equal(t, time.Duration(0), drainEstimate(0, 0, 0))
	require.Equal(t, DrainUnknown, drainEstimate(10, 0, 59))
	require.Equal(t, DrainUnknown, drainEstimate(10, 5, 0))
	require.Equal(t, 100*time.Second, drainEstimate(1000, 590, 59), "10 jobs/s")
	require.Equal(t, DrainUnknown, drainEstimate(1<<40, 1, 59), "capped")
}
