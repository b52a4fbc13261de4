package upstreamsim

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"
)

type bundle struct {
	ts     *TestServer
	clock  *clockwork.FakeClock
	client *openai.Client
}

func setup(t *testing.T, cfg Config) *bundle {
	t.Helper()
	clock := clockwork.NewFakeClockAt(t0)
	ts := NewTestServer(t, cfg, WithClock(clock))
	return &bundle{ts: ts, clock: clock, client: ts.Client("sk-test-key-0001")}
}

func chatReq(model, content string, maxTokens int) openai.ChatCompletionRequest {
	return openai.ChatCompletionRequest{
		Model:    model,
		Messages: []openai.ChatCompletionMessage{{Role: "user", Content: content}},
		//lint:ignore SA1019 the simulator must accept max_tokens, which clients still send
		MaxTokens: maxTokens,
	}
}

func apiErr(t *testing.T, err error) *openai.APIError {
	t.Helper()
	var e *openai.APIError
	require.ErrorAs(t, err, &e)
	return e
}

func countTokens(t *testing.T, text string) int {
	t.Helper()
	cs, err := loadCodecs()
	require.NoError(t, err)
	n, err := cs["o200k_base"].Count(text)
	require.NoError(t, err)
	return n
}

var reqIDRe = regexp.MustCompile(`^req_[0-9a-f]{32}$`)

func TestChatCompletion(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Default: ModelConfig{Limits: Limits{RPM: 60, TPM: 10_000}}, Seed: 7})
	resp, err := b.client.CreateChatCompletion(context.Background(), chatReq("gpt-4o-mini", "Say hello to the world", 50))
	require.NoError(t, err)
	require.Len(t, resp.Choices, 1)
	require.Equal(t, "assistant", resp.Choices[0].Message.Role)
	require.Equal(t, "gpt-4o-mini", resp.Model)
	require.Equal(t, "chat.completion", resp.Object)
	require.True(t, strings.HasPrefix(resp.ID, "chatcmpl-"))
	// Prompt: 3 + (3 + 1 "user" + 5 content tokens) = 12.
	require.Equal(t, 3+3+countTokens(t, "user")+countTokens(t, "Say hello to the world"), resp.Usage.PromptTokens)
	require.Equal(t, countTokens(t, resp.Choices[0].Message.Content), resp.Usage.CompletionTokens)
	require.LessOrEqual(t, resp.Usage.CompletionTokens, 50)
	require.GreaterOrEqual(t, resp.Usage.CompletionTokens, 16)
	require.Equal(t, resp.Usage.PromptTokens+resp.Usage.CompletionTokens, resp.Usage.TotalTokens)

	h := resp.Header()
	require.Regexp(t, reqIDRe, h.Get("x-request-id"))
	require.Equal(t, "2020-10-01", h.Get("openai-version"))
	require.Equal(t, "0", h.Get("openai-processing-ms"))
	rl := resp.GetRateLimitHeaders()
	require.Equal(t, 60, rl.LimitRequests)
	require.Equal(t, 10_000, rl.LimitTokens)
	require.Equal(t, 59, rl.RemainingRequests)
	require.Equal(t, 10_000-resp.Usage.PromptTokens-50, rl.RemainingTokens)
	require.Equal(t, "1s", string(rl.ResetRequests))
	// (12+50) tokens at 10000/60 per second: 372ms.
	require.Equal(t, "372ms", string(rl.ResetTokens))

	// Deterministic: the same request gets the same answer.
	again, err := b.client.CreateChatCompletion(context.Background(), chatReq("gpt-4o-mini", "Say hello to the world", 50))
	require.NoError(t, err)
	require.Equal(t, resp.Choices[0].Message.Content, again.Choices[0].Message.Content)

	// max_completion_tokens caps the output: finish_reason length.
	r := chatReq("gpt-4o-mini", "Say hello to the world", 0)
	r.MaxCompletionTokens = 3
	r.N = 2
	capped, err := b.client.CreateChatCompletion(context.Background(), r)
	require.NoError(t, err)
	require.Len(t, capped.Choices, 2)
	for _, c := range capped.Choices {
		require.Equal(t, openai.FinishReasonLength, c.FinishReason)
		require.Equal(t, 3, countTokens(t, c.Message.Content))
	}
	require.Equal(t, 6, capped.Usage.CompletionTokens)

	st := b.ts.Sim.Stats().Models["gpt-4o-mini"]
	require.Equal(t, int64(3), st.Accepted)
	require.Equal(t, int64(3*resp.Usage.PromptTokens), st.PromptTokens)
	require.Len(t, st.Timeline, 1)
	require.Equal(t, int64(3), st.Timeline[0].Requests)
}

func TestOutputExactTokens(t *testing.T) {
	t.Parallel()
	s, err := New(Config{Output: OutputConfig{Distribution: DistFixed, Min: 1, Max: 5000, Mean: 4000}})
	require.NoError(t, err)
	req, aerr := parseChat([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`), "")
	require.Nil(t, aerr)
	for _, enc := range []string{"o200k_base", "cl100k_base"} {
		m := s.cfg.Default
		m.Encoding = enc
		p, aerr := s.chat.plan(req, m)
		require.Nil(t, aerr)
		c := s.chat.complete(p)
		n, err := s.chat.counters[enc].codec.Count(c.choices[0].text)
		require.NoError(t, err)
		require.Equal(t, 4000, n, enc)
		require.Equal(t, 4000, c.completionTokens)
	}
}

func TestChatErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{
		APIKeys:        []string{"sk-test-key-0001"},
		Models:         map[string]ModelConfig{"gpt-4o-mini": {ContextWindow: 100}},
		RestrictModels: true,
	})
	ctx := context.Background()

	_, err := b.client.CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: "gpt-4o-mini"})
	e := apiErr(t, err)
	require.Equal(t, 400, e.HTTPStatusCode)
	require.Equal(t, "invalid_request_error", e.Type)
	require.Equal(t, "messages", *e.Param)
	require.Equal(t, "missing_required_parameter", e.Code)
	require.Equal(t, "Missing required parameter: 'messages'.", e.Message)
	e = apiErr(t, func() error {
		_, err := b.client.CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: "gpt-4o-mini", Messages: []openai.ChatCompletionMessage{}})
		return err
	}())
	require.Equal(t, "empty_array", e.Code)
	require.Equal(t, "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.", e.Message)

	r := chatReq("gpt-4o-mini", "hi", 0)
	r.Messages[0].Role = "robot"
	e = apiErr(t, func() error { _, err := b.client.CreateChatCompletion(ctx, r); return err }())
	require.Equal(t, "messages[0].role", *e.Param)
	require.Equal(t, "invalid_value", e.Code)

	r = chatReq("gpt-4o-mini", "hi", 0)
	r.Temperature = 3
	e = apiErr(t, func() error { _, err := b.client.CreateChatCompletion(ctx, r); return err }())
	require.Equal(t, "temperature", *e.Param)
	require.Equal(t, "decimal_above_max_value", e.Code)

	_, err = b.client.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", strings.Repeat("hello ", 50), 60))
	e = apiErr(t, err)
	require.Equal(t, 400, e.HTTPStatusCode)
	require.Equal(t, "context_length_exceeded", e.Code)
	require.Equal(t, "messages", *e.Param)
	require.Equal(t, "This model's maximum context length is 100 tokens. However, you requested 118 tokens (58 in the messages, 60 in the completion). Please reduce the length of the messages or completion.", e.Message)

	_, err = b.client.CreateChatCompletion(ctx, chatReq("gpt-4", "hi", 5))
	e = apiErr(t, err)
	require.Equal(t, 404, e.HTTPStatusCode)
	require.Equal(t, "model_not_found", e.Code)
	require.Nil(t, e.Param)
	require.Equal(t, "The model `gpt-4` does not exist or you do not have access to it.", e.Message)

	bad := openai.NewClientWithConfig(b.ts.ClientConfig("sk-wrong-key-9999"))
	_, err = bad.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", "hi", 5))
	e = apiErr(t, err)
	require.Equal(t, 401, e.HTTPStatusCode)
	require.Equal(t, "invalid_api_key", e.Code)
	require.Equal(t, "Incorrect API key provided: sk-wro***...9999. You can find your API key at https://platform.openai.com/account/api-keys.", e.Message)

	// Raw: invalid JSON, and an unknown URL.
	resp := post(t, b.ts.URL+"/chat/completions", "sk-test-key-0001", "{not json")
	require.Equal(t, 400, resp.status)
	require.Contains(t, resp.body, `"param":null`)
	require.Contains(t, resp.body, `"code":null`)
	resp = post(t, b.ts.URL+"/nope", "sk-test-key-0001", "{}")
	require.Equal(t, 404, resp.status)
	require.Contains(t, resp.body, "Invalid URL (POST /v1/nope)")

	models, err := b.client.ListModels(ctx)
	require.NoError(t, err)
	require.Len(t, models.Models, 1)
	require.Equal(t, int64(7), b.ts.Sim.Stats().Total.Invalid)
}

type rawResp struct {
	status int
	header http.Header
	body   string
}

func post(t *testing.T, url, key, body string) rawResp {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) rawResp {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return rawResp{resp.StatusCode, resp.Header, string(b)}
}

func TestRateLimit429(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Default: ModelConfig{Limits: Limits{RPM: 3, TPM: 1000}}})
	ctx := context.Background()
	for range 3 {
		_, err := b.client.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", "hi", 10))
		require.NoError(t, err)
	}
	resp, err := b.client.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", "hi", 10))
	e := apiErr(t, err)
	require.Equal(t, 429, e.HTTPStatusCode)
	require.Equal(t, "requests", e.Type)
	require.Equal(t, "rate_limit_exceeded", e.Code)
	require.Nil(t, e.Param)
	require.Equal(t, "Rate limit reached for gpt-4o-mini in organization org-llmqsim on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 20s. Visit https://platform.openai.com/account/rate-limits to learn more.", e.Message)
	require.Equal(t, "20", resp.Header().Get("retry-after"))
	require.Equal(t, "0", resp.Header().Get("x-ratelimit-remaining-requests"))
	require.Equal(t, "1m0s", resp.Header().Get("x-ratelimit-reset-requests"))
	require.Empty(t, resp.Header().Get("retry-after-ms"))

	b.clock.Advance(20 * time.Second)
	_, err = b.client.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", "hi", 10))
	require.NoError(t, err)
	require.Equal(t, int64(1), b.ts.Sim.Stats().Models["gpt-4o-mini"].RateLimited["requests"])
}

func TestRateLimitTokens429(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Default: ModelConfig{Limits: Limits{RPM: 100, TPM: 1000}}})
	ctx := context.Background()
	// "hi" is 8 prompt tokens: charge 608, 392 left.
	_, err := b.client.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", "hi", 600))
	require.NoError(t, err)
	resp, err := b.client.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", "hi", 500))
	e := apiErr(t, err)
	require.Equal(t, 429, e.HTTPStatusCode)
	require.Equal(t, "tokens", e.Type)
	require.Equal(t, "rate_limit_exceeded", e.Code)
	// (508 - 392) / (1000/60) = 6.96s
	require.Equal(t, "Rate limit reached for gpt-4o-mini in organization org-llmqsim on tokens per min (TPM): Limit 1000, Used 608, Requested 508. Please try again in 6.96s. Visit https://platform.openai.com/account/rate-limits to learn more.", e.Message)
	require.Equal(t, "7", resp.Header().Get("retry-after"))
	require.Equal(t, "392", resp.Header().Get("x-ratelimit-remaining-tokens"))
	require.Equal(t, "98", resp.Header().Get("x-ratelimit-remaining-requests"), "the rejected request counts toward RPM")

	_, err = b.client.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", "hi", 1200))
	e = apiErr(t, err)
	require.Equal(t, "tokens", e.Type)
	require.Equal(t, "Request too large for gpt-4o-mini in organization org-llmqsim on tokens per min (TPM): Limit 1000, Requested 1208. The input or output tokens must be reduced in order to run successfully. Visit https://platform.openai.com/account/rate-limits to learn more.", e.Message)

	b.clock.Advance(6960 * time.Millisecond)
	_, err = b.client.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", "hi", 500))
	require.NoError(t, err, "waiting exactly the advertised time is enough")
	st := b.ts.Sim.Stats().Total
	require.Equal(t, map[string]int64{"tokens": 1, "too_large": 1}, st.RateLimited)
}
