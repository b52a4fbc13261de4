package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/shaping"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	api := func(status int, code any, typ string) error {
		return fmt.Errorf("call: %w", &openai.APIError{HTTPStatusCode: status, Code: code, Type: typ, Message: "m"})
	}
	// decoded is the error go-openai makes of an error body.
	decoded := func(status int, body string) error {
		var e openai.ErrorResponse
		require.NoError(t, json.Unmarshal([]byte(body), &e))
		e.Error.HTTPStatusCode = status
		return fmt.Errorf("call: %w", e.Error)
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
		{"insufficient_quota by type alone", api(429, "quota_exceeded", "insufficient_quota"), ProviderOpenAI, ClassPermanent, "quota_exceeded"},
		{"dashscope insufficient_quota by type alone is TPM", api(429, "quota_exceeded", "insufficient_quota"), ProviderDashScope, ClassRateLimited, "quota_exceeded"},
		{"dashscope burst", api(429, "limit_burst_rate", "limit_burst_rate"), ProviderDashScope, ClassRateLimited, "limit_burst_rate"},
		{"azure numeric-string 429", api(429, "429", ""), ProviderOpenAI, ClassRateLimited, "429"},
		{"500", api(500, nil, "server_error"), ProviderOpenAI, ClassRetryable, "server_error"},
		{"500 with a null code", decoded(500, `{"error":{"message":"m","type":"server_error","param":null,"code":null}}`), ProviderOpenAI, ClassRetryable, "server_error"},
		{"numeric code", decoded(429, `{"error":{"message":"m","type":"","code":429}}`), ProviderOpenAI, ClassRateLimited, "429"},
		{"503 overloaded", api(503, "server_is_overloaded", "service_unavailable_error"), ProviderOpenAI, ClassRetryable, "server_is_overloaded"},
		{"502 html", &openai.RequestError{HTTPStatusCode: 502, Err: errors.New("bad gateway")}, ProviderOpenAI, ClassRetryable, "http_502"},
		{"408", &openai.RequestError{HTTPStatusCode: 408}, ProviderOpenAI, ClassRetryable, "http_408"},
		{"400", api(400, "context_length_exceeded", "invalid_request_error"), ProviderOpenAI, ClassPermanent, "context_length_exceeded"},
		{"401", api(401, "invalid_api_key", "invalid_request_error"), ProviderOpenAI, ClassPermanent, "invalid_api_key"},
		{"404", api(404, "model_not_found", "invalid_request_error"), ProviderOpenAI, ClassPermanent, "model_not_found"},
		{"timeout", fmt.Errorf("post: %w", context.DeadlineExceeded), ProviderOpenAI, ClassRetryable, "timeout"},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), ProviderOpenAI, ClassRetryable, "connection_error"},
		{"unknown", errors.New("json: cannot unmarshal"), ProviderOpenAI, ClassPermanent, "client_error"},
		{"answer too large, even on a 502", fmt.Errorf("error, reading response body: %w", &ResponseTooLargeError{Status: 502, Limit: 10}),
			ProviderOpenAI, ClassPermanent, CodeResponseTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := Classify(tt.err, nil, tt.provider)
			require.Equal(t, tt.class, o.Class, o.Class.String())
			require.Equal(t, tt.code, o.Code)
		})
	}
}

func TestParseProvider(t *testing.T) {
	t.Parallel()
	for _, p := range []Provider{ProviderOpenAI, ProviderDashScope} {
		got, err := ParseProvider(string(p))
		require.NoError(t, err)
		require.Equal(t, p, got)
	}
	_, err := ParseProvider("dashcope")
	require.ErrorContains(t, err, `unknown provider "dashcope"`)
}

// TestClassifyReadsHeaders: the rate-limit headers and Retry-After are read
// on success and on the error path alike (go-openai keeps them on both).
func TestClassifyReadsHeaders(t *testing.T) {
	t.Parallel()
	ok := Classify(nil, http.Header{"X-Ratelimit-Remaining-Requests": {"7"}}, ProviderOpenAI)
	require.Equal(t, Outcome{Class: ClassSuccess, Status: http.StatusOK,
		Headers: shaping.RateLimitHeaders{RemainingRequests: 7, HasRemainingRequests: true}}, ok)

	err := &openai.APIError{HTTPStatusCode: 429, Code: "rate_limit_exceeded", Type: "requests", Message: "slow down"}
	limited := Classify(err, http.Header{"Retry-After": {"3"}}, ProviderOpenAI)
	require.Equal(t, Outcome{Class: ClassRateLimited, Status: 429, Code: "rate_limit_exceeded", Message: "HTTP 429: slow down",
		Headers: shaping.RateLimitHeaders{RetryAfter: 3 * time.Second, HasRetryAfter: true}, Err: err}, limited)

	// A 429 for the provider's calls at a time says so to the lane.
	msg := "Rate limit reached for gpt-4o-mini in organization org-x on concurrent requests: Limit 4, Used 4, Requested 1."
	busy := Classify(&openai.APIError{HTTPStatusCode: 429, Code: "rate_limit_exceeded", Type: "requests", Message: msg}, nil, ProviderOpenAI)
	require.True(t, busy.Headers.Concurrency)
}

// TestClassifyStatusBounds: the status ranges at their edges, as go-openai
// reports a reply whose body it could not decode.
func TestClassifyStatusBounds(t *testing.T) {
	t.Parallel()
	for status, want := range map[int]Class{
		399: ClassRetryable, 400: ClassPermanent, 408: ClassRetryable, 409: ClassRetryable,
		429: ClassRateLimited, 499: ClassPermanent, 500: ClassRetryable,
	} {
		o := Classify(&openai.RequestError{HTTPStatusCode: status}, nil, ProviderOpenAI)
		require.Equal(t, want, o.Class, "status %d: %s", status, o.Class)
	}
}
