package upstreamsim

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"
)

func TestStream(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Output: OutputConfig{Distribution: DistFixed, Min: 1, Max: 100, Mean: 12}})
	ctx := context.Background()
	r := chatReq("gpt-4o-mini", "Tell me a story", 0)
	r.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	st, err := b.client.CreateChatCompletionStream(ctx, r)
	require.NoError(t, err)
	defer func() { _ = st.Close() }()
	require.Equal(t, "text/event-stream; charset=utf-8", st.Header().Get("content-type"))
	require.Regexp(t, reqIDRe, st.Header().Get("x-request-id"))
	require.NotEmpty(t, st.Header().Get("x-ratelimit-remaining-tokens"))
	var text strings.Builder
	var u *openai.Usage
	var finish openai.FinishReason
	chunks := 0
	for {
		c, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		chunks++
		require.Equal(t, "chat.completion.chunk", c.Object)
		if c.Usage != nil {
			require.Empty(t, c.Choices)
			u = c.Usage
			continue
		}
		require.Len(t, c.Choices, 1)
		text.WriteString(c.Choices[0].Delta.Content)
		if c.Choices[0].FinishReason != "" {
			finish = c.Choices[0].FinishReason
		}
	}
	require.Equal(t, 12+1+1, chunks, "12 tokens (the role with the first), finish, usage")
	require.Equal(t, openai.FinishReasonStop, finish)
	require.NotNil(t, u)
	require.Equal(t, 12, u.CompletionTokens)
	require.Equal(t, 12, countTokens(t, text.String()))

	// Without include_usage there is no usage chunk; the body ends in [DONE].
	raw := post(t, b.ts.URL+"/chat/completions", "k", `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"max_tokens":2}`)
	require.Equal(t, 200, raw.status)
	require.True(t, strings.HasSuffix(raw.body, "data: [DONE]\n\n"))
	require.NotContains(t, raw.body, `"usage"`)
	require.Equal(t, 4, strings.Count(raw.body, "data: "), "2 tokens, finish, [DONE]")
}

func TestLatency(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{
		Latency: LatencyConfig{TTFT: time.Second, PerToken: 10 * time.Millisecond, Capacity: 2, CongestionFactor: 1},
		Output:  OutputConfig{Distribution: DistFixed, Min: 1, Max: 100, Mean: 100},
	})
	ttft, per := b.ts.Sim.chat.latency(2)
	require.Equal(t, time.Second, ttft)
	require.Equal(t, 10*time.Millisecond, per)
	_, per = b.ts.Sim.chat.latency(4)
	require.Equal(t, 20*time.Millisecond, per, "twice the capacity in flight doubles the time per token")

	type result struct {
		resp openai.ChatCompletionResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := b.client.CreateChatCompletion(context.Background(), chatReq("gpt-4o-mini", "hi", 0))
		done <- result{resp, err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.clock.BlockUntilContext(ctx, 1))
	b.clock.Advance(1999 * time.Millisecond)
	select {
	case <-done:
		t.Fatal("answered before TTFT + 100 tokens")
	default:
	}
	b.clock.Advance(time.Millisecond)
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("no answer")
	}
	require.NoError(t, r.err)
	require.Equal(t, "2000", r.resp.Header().Get("openai-processing-ms"))
}

func TestFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		kind   FaultKind
		status int
		typ    string
		code   any
		html   bool
	}{
		// go-openai decodes "code": null as 0.
		{FaultServerError, 500, "server_error", 0, false},
		{FaultOverloaded, 503, "service_unavailable_error", "server_is_overloaded", false},
		{FaultTimeout, 408, "server_error", "timeout", false},
		{FaultSlowDown, 429, "rate_limit_error", "slow_down", false},
		{FaultInsufficientQuota, 429, "insufficient_quota", "insufficient_quota", false},
		{FaultConflict, 409, "invalid_request_error", 0, false},
		{FaultBadGateway, 502, "", 0, true},
		{FaultGatewayTimeout, 504, "", 0, true},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			t.Parallel()
			b := setup(t, Config{Faults: FaultConfig{Rates: map[FaultKind]float64{tc.kind: 1}, ShouldRetryFalse: true}})
			resp, err := b.client.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", "hi", 5))
			require.Error(t, err)
			if tc.html {
				var re *openai.RequestError
				require.ErrorAs(t, err, &re)
				require.Equal(t, tc.status, re.HTTPStatusCode)
				require.Contains(t, string(re.Body), "</html>")
			} else {
				e := apiErr(t, err)
				require.Equal(t, tc.status, e.HTTPStatusCode)
				require.Equal(t, tc.typ, e.Type)
				require.Equal(t, tc.code, e.Code)
			}
			if tc.kind == FaultInsufficientQuota {
				require.Equal(t, "false", resp.Header().Get("x-should-retry"))
				require.Empty(t, resp.Header().Get("retry-after"))
			}
			if tc.kind == FaultSlowDown {
				require.Equal(t, "1", resp.Header().Get("retry-after"))
			}
			require.Equal(t, int64(1), b.ts.Sim.Stats().Models["gpt-4o-mini"].Faults[string(tc.kind)])
		})
	}
	t.Run("connection_reset", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{Faults: FaultConfig{Rates: map[FaultKind]float64{FaultConnectionReset: 1}}})
		_, err := b.client.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", "hi", 5))
		require.Error(t, err)
		var ae *openai.APIError
		require.False(t, errors.As(err, &ae))
	})
	t.Run("hang", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{Faults: FaultConfig{Rates: map[FaultKind]float64{FaultHang: 1}}})
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err := b.client.CreateChatCompletion(cctx, chatReq("gpt-4o-mini", "hi", 5))
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
	t.Run("rates", func(t *testing.T) {
		t.Parallel()
		s, err := New(Config{Seed: 3, Faults: FaultConfig{Rates: map[FaultKind]float64{FaultServerError: 0.1, FaultOverloaded: 0.2}}})
		require.NoError(t, err)
		counts := map[FaultKind]int{}
		for range 10000 {
			counts[s.drawFault("m")]++
		}
		require.InDelta(t, 1000, counts[FaultServerError], 100)
		require.InDelta(t, 2000, counts[FaultOverloaded], 150)
		require.InDelta(t, 7000, counts[""], 200)
	})
}

// headerTransport adds fixed headers to every request.
type headerTransport struct {
	h    http.Header
	base http.RoundTripper
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.h {
		r.Header[k] = v
	}
	return t.base.RoundTrip(r)
}

func TestDashScopeMode(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Mode: ModeDashScope, Default: ModelConfig{Limits: Limits{RPM: 5, TPM: 100, BurstGrowth: 2, BurstFloor: 1}}})
	ctx := context.Background()
	_, err := b.client.CreateChatCompletion(ctx, chatReq("qwen-plus", "hi", 10))
	require.NoError(t, err)
	// Same second: the burst limit rejects.
	_, err = b.client.CreateChatCompletion(ctx, chatReq("qwen-plus", "hi", 10))
	e := apiErr(t, err)
	require.Equal(t, 429, e.HTTPStatusCode)
	require.Equal(t, "limit_burst_rate", e.Code)
	require.Equal(t, "limit_burst_rate", e.Type)
	require.Equal(t, "", *e.Param)
	require.Equal(t, "Request rate increased too quickly. To ensure system stability, please adjust your client logic to scale requests more smoothly over time.", e.Message)

	// With X-DashScope-Wait-Timeout the request is queued server-side
	// until the next second admits it.
	cfg := b.ts.ClientConfig("sk-test-key-0001")
	cfg.HTTPClient = &http.Client{Transport: headerTransport{h: http.Header{"X-Dashscope-Wait-Timeout": {"30"}}, base: http.DefaultTransport}}
	waiting := openai.NewClientWithConfig(cfg)
	done := make(chan error, 1)
	go func() {
		_, err := waiting.CreateChatCompletion(ctx, chatReq("qwen-plus", "hi", 10))
		done <- err
	}()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, b.clock.BlockUntilContext(wctx, 1), "%+v", b.ts.Sim.Stats().Total)
	b.clock.Advance(time.Second)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-wctx.Done():
		t.Fatal("queued request not admitted")
	}

	// TPM: insufficient_quota (retryable on DashScope); RPM: limit_requests.
	b.clock.Advance(10 * time.Second)
	_, err = waiting.CreateChatCompletion(ctx, chatReq("qwen-plus", "hi", 90))
	e = apiErr(t, err)
	require.Equal(t, "insufficient_quota", e.Code)
	require.Equal(t, "Allocated quota exceeded, please increase your quota limit.", e.Message)
	for range 3 {
		b.clock.Advance(time.Second)
		_, _ = b.client.CreateChatCompletion(ctx, chatReq("qwen-plus", "a", 1))
	}
	b.clock.Advance(time.Second)
	_, err = b.client.CreateChatCompletion(ctx, chatReq("qwen-plus", "a", 1))
	e = apiErr(t, err)
	require.Equal(t, "limit_requests", e.Code)
}

func TestAzureMode(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Mode: ModeAzure, Default: ModelConfig{Limits: Limits{RPM: 1, TPM: -1}}})
	cfg := openai.DefaultAzureConfig("azure-key", b.ts.Root)
	client := openai.NewClientWithConfig(cfg)
	ctx := context.Background()
	resp, err := client.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", "hi", 5))
	require.NoError(t, err)
	require.Equal(t, "0", resp.Header().Get("x-ratelimit-remaining-requests"))
	resp, err = client.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", "hi", 5))
	e := apiErr(t, err)
	require.Equal(t, 429, e.HTTPStatusCode)
	require.Equal(t, "429", e.Code)
	require.Empty(t, e.Type)
	require.Equal(t, "60", resp.Header().Get("retry-after"))
	require.Equal(t, "60000", resp.Header().Get("retry-after-ms"))
	require.Contains(t, e.Message, "under Azure OpenAI API version 2023-05-15 have exceeded call rate limit")
}

func TestOmitHeadersOn429(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Default: ModelConfig{Limits: Limits{RPM: 1}}, OmitRateLimitHeadersOn429: true, OmitRetryAfterOn429: true})
	ctx := context.Background()
	_, err := b.client.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", "hi", 5))
	require.NoError(t, err)
	resp, err := b.client.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", "hi", 5))
	require.Equal(t, 429, apiErr(t, err).HTTPStatusCode)
	for _, h := range []string{"retry-after", "x-ratelimit-limit-requests", "x-ratelimit-remaining-tokens"} {
		require.Empty(t, resp.Header().Get(h), h)
	}
	require.Regexp(t, reqIDRe, resp.Header().Get("x-request-id"))
}

func TestRuntimeLimits(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{
		Default:  ModelConfig{Limits: Limits{RPM: 100}},
		Schedule: []ScheduleEntry{{At: 30 * time.Second, Model: "gpt-4o-mini", Limits: Limits{RPM: 10, TPM: 5000}}},
	})
	ctx := context.Background()
	resp, err := b.client.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", "hi", 5))
	require.NoError(t, err)
	require.Equal(t, 100, resp.GetRateLimitHeaders().LimitRequests)

	raw := post(t, b.ts.Root+"/sim/limits", "", `{"model":"gpt-4o-mini","rpm":50,"tpm":1000,"concurrency":3}`)
	require.Equal(t, 200, raw.status, raw.body)
	var got LimitsUpdate
	require.NoError(t, json.Unmarshal([]byte(raw.body), &got))
	require.Equal(t, Limits{RPM: 50, TPM: 1000, MaxConcurrency: 3, BurstFloor: 1}, got.Limits)
	resp, err = b.client.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", "hi", 5))
	require.NoError(t, err)
	rl := resp.GetRateLimitHeaders()
	require.Equal(t, 50, rl.LimitRequests)
	require.Equal(t, 1000, rl.LimitTokens)
	require.Equal(t, 49, rl.RemainingRequests, "the bucket keeps its level, capped at the new capacity")

	raw = post(t, b.ts.Root+"/sim/limits", "", `{"rpm":-5}`)
	require.Equal(t, 400, raw.status)

	b.clock.Advance(30 * time.Second)
	resp, err = b.client.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", "hi", 5))
	require.NoError(t, err)
	require.Equal(t, 10, resp.GetRateLimitHeaders().LimitRequests)
	require.Equal(t, 5000, resp.GetRateLimitHeaders().LimitTokens)
	require.Equal(t, int64(10), b.ts.Sim.Limits("gpt-4o-mini").RPM)
	require.Equal(t, int64(100), b.ts.Sim.Limits("other").RPM)
}

func TestStatsResetMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Default: ModelConfig{Limits: Limits{RPM: 2}}, Output: OutputConfig{Distribution: DistFixed, Min: 1, Max: 10, Mean: 10}})
	ctx := context.Background()
	for range 3 {
		_, _ = b.client.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", "hi", 10))
		b.clock.Advance(time.Second)
	}
	get := func(path string) rawResp {
		req, err := http.NewRequest(http.MethodGet, b.ts.Root+path, nil)
		require.NoError(t, err)
		return do(t, req)
	}
	var st Stats
	require.NoError(t, json.Unmarshal([]byte(get("/sim/stats").body), &st))
	m := st.Models["gpt-4o-mini"]
	require.Equal(t, int64(2), m.Accepted)
	require.Equal(t, int64(1), m.RateLimited["requests"])
	require.Equal(t, int64(16), m.PromptTokens)
	require.Equal(t, int64(20), m.CompletionTokens)
	require.InDelta(t, (16*0.15+20*0.60)/1e6, m.CostUSD, 1e-12)
	require.Equal(t, []TimelinePoint{
		{Second: t0.Unix(), Requests: 1, PromptTokens: 8, CompletionTokens: 10, Tokens: 18},
		{Second: t0.Unix() + 1, Requests: 1, PromptTokens: 8, CompletionTokens: 10, Tokens: 18},
	}, m.Timeline)
	require.Equal(t, m.Accepted, st.Total.Accepted)

	metrics := get("/metrics").body
	require.Contains(t, metrics, `llmq_sim_requests_total{model="gpt-4o-mini",outcome="ok"} 2`)
	require.Contains(t, metrics, `llmq_sim_rate_limited_total{model="gpt-4o-mini",reason="requests"} 1`)
	require.Contains(t, metrics, `llmq_sim_tokens_total{kind="completion",model="gpt-4o-mini"} 20`)

	require.Equal(t, 200, post(t, b.ts.Root+"/sim/reset", "", "").status)
	require.Empty(t, b.ts.Sim.Stats().Models)
	// The limiter was reset too: a full bucket again.
	resp, err := b.client.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", "hi", 10))
	require.NoError(t, err)
	require.Equal(t, 1, resp.GetRateLimitHeaders().RemainingRequests)
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Mode: "x"}, "mode"},
		{Config{Default: ModelConfig{Limits: Limits{RPM: -2}}}, "default.rpm"},
		{Config{Models: map[string]ModelConfig{"m": {Limits: Limits{TPM: -3}}}}, "models.m.tpm"},
		{Config{Faults: FaultConfig{Rates: map[FaultKind]float64{"nope": 0.1}}}, "faults.rates"},
		{Config{Faults: FaultConfig{Rates: map[FaultKind]float64{FaultHang: 0.6, FaultServerError: 0.6}}}, "sum"},
		{Config{Output: OutputConfig{Min: 10, Max: 5}}, "output.min"},
		{Config{RestrictModels: true}, "restrict_models"},
		{Config{Schedule: []ScheduleEntry{{At: -1}}}, "schedule[0].at"},
		{Config{Enforcement: "second"}, `enforcement must be minute or short, got "second"`},
		{Config{ShortBucket: -time.Second}, "short_bucket must not be negative"},
		{Config{RateLimitHeaders: "some"}, `rate_limit_headers must be all or none, got "some"`},
	} {
		err := tc.cfg.Validate()
		require.ErrorIs(t, err, ErrInvalidConfig)
		require.ErrorContains(t, err, tc.want)
	}
	require.NoError(t, Config{}.Validate())
	d := Config{}.WithDefaults()
	require.Equal(t, RPMDefault, d.Default.RPM)
	require.Equal(t, ModeOpenAI, d.Mode)
	require.Equal(t, []any{EnforcementMinute, 5 * time.Second, HeadersAll}, []any{d.Enforcement, d.ShortBucket, d.RateLimitHeaders})
	require.NoError(t, d.Validate())
}

// TestShortEnforcement: with enforcement short, a client that spends more
// than 5 s of refill at once is refused, while the headers (the per-minute
// view, as OpenAI's) still show plenty remaining; waiting the advertised
// time is enough.
func TestShortEnforcement(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Enforcement: EnforcementShort, Default: ModelConfig{Limits: Limits{RPM: 600, TPM: 6000}}})
	ctx := context.Background()
	// "hi" is 8 prompt tokens: 308 charged of a 500-token short bucket.
	resp, err := b.client.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", "hi", 300))
	require.NoError(t, err)
	require.Equal(t, "5692", resp.Header().Get("x-ratelimit-remaining-tokens"))
	resp, err = b.client.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", "hi", 300))
	e := apiErr(t, err)
	require.Equal(t, 429, e.HTTPStatusCode)
	require.Equal(t, "tokens", e.Type)
	require.Equal(t, "rate_limit_exceeded", e.Code)
	require.Equal(t, "Rate limit reached for gpt-4o-mini in organization org-llmqsim on tokens per min (TPM): Limit 6000, Used 308, Requested 308. Please try again in 1.16s. Visit https://platform.openai.com/account/rate-limits to learn more.", e.Message)
	require.Equal(t, "5692", resp.Header().Get("x-ratelimit-remaining-tokens"), "the minute looks far from spent")
	require.Equal(t, "598", resp.Header().Get("x-ratelimit-remaining-requests"))
	require.Equal(t, "6000", resp.Header().Get("x-ratelimit-limit-tokens"))
	require.Equal(t, "2", resp.Header().Get("retry-after"))

	b.clock.Advance(1160 * time.Millisecond)
	_, err = b.client.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", "hi", 300))
	require.NoError(t, err, "waiting exactly the advertised time is enough")
	require.Equal(t, int64(1), b.ts.Sim.Stats().Total.RateLimited["tokens"])

	// The minute enforcement admits the same burst.
	m := setup(t, Config{Default: ModelConfig{Limits: Limits{RPM: 600, TPM: 6000}}})
	for range 2 {
		_, err := m.client.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", "hi", 300))
		require.NoError(t, err)
	}
}

// TestRateLimitHeadersNone: rate_limit_headers none sends no x-ratelimit-*
// header on any answer; a 429 still carries Retry-After.
func TestRateLimitHeadersNone(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{RateLimitHeaders: HeadersNone, Default: ModelConfig{Limits: Limits{RPM: 1, TPM: 1000}}})
	ctx := context.Background()
	ok, err := b.client.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", "hi", 5))
	require.NoError(t, err)
	refused, err := b.client.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", "hi", 5))
	require.Equal(t, 429, apiErr(t, err).HTTPStatusCode)
	for _, h := range []http.Header{ok.Header(), refused.Header()} {
		for k := range h {
			require.NotContains(t, strings.ToLower(k), "x-ratelimit", k)
		}
		require.Regexp(t, reqIDRe, h.Get("x-request-id"))
	}
	require.Equal(t, "60", refused.Header().Get("retry-after"))
}

func TestChargeModes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	out := OutputConfig{Distribution: DistFixed, Min: 1, Max: 100, Mean: 10}
	lim := ModelConfig{Limits: Limits{RPM: 100, TPM: 6000}}
	// sum: 8 prompt + 100 max output reserved and kept.
	b := setup(t, Config{Default: lim, Output: out})
	resp, err := b.client.CreateChatCompletion(ctx, chatReq("m", "hi", 100))
	require.NoError(t, err)
	require.Equal(t, 6000-108, resp.GetRateLimitHeaders().RemainingTokens)
	// max: max(8, 100).
	b = setup(t, Config{Default: lim, Output: out, Charge: ChargeMax})
	resp, err = b.client.CreateChatCompletion(ctx, chatReq("m", "hi", 100))
	require.NoError(t, err)
	require.Equal(t, 6000-100, resp.GetRateLimitHeaders().RemainingTokens)
	// true-up: the unused 90 tokens come back once the answer is known.
	b = setup(t, Config{Default: lim, Output: out, TrueUp: true})
	resp, err = b.client.CreateChatCompletion(ctx, chatReq("m", "hi", 100))
	require.NoError(t, err)
	require.Equal(t, 6000-108, resp.GetRateLimitHeaders().RemainingTokens)
	resp, err = b.client.CreateChatCompletion(ctx, chatReq("m", "hi", 100))
	require.NoError(t, err)
	require.Equal(t, 6000-18-108, resp.GetRateLimitHeaders().RemainingTokens)
	// No max_tokens: the model's default max output (4096) is reserved.
	b = setup(t, Config{Default: ModelConfig{Limits: Limits{TPM: 100_000}}, Output: out})
	resp, err = b.client.CreateChatCompletion(ctx, chatReq("m", "hi", 0))
	require.NoError(t, err)
	require.Equal(t, 100_000-8-4096, resp.GetRateLimitHeaders().RemainingTokens)
}

func TestSetLimitsKeepsUnsetFields(t *testing.T) {
	t.Parallel()
	s, err := New(Config{
		Default: ModelConfig{Limits: Limits{RPM: 100, TPM: 1000}},
		Models:  map[string]ModelConfig{"big": {Limits: Limits{RPM: 5000, TPM: 900_000, MaxConcurrency: 8}}},
	})
	require.NoError(t, err)
	s.SetLimits("big", Limits{RPM: 50})
	require.Equal(t, Limits{RPM: 50, TPM: 900_000, MaxConcurrency: 8, BurstFloor: 1}, s.Limits("big"))
	s.SetLimits("big", Limits{MaxConcurrency: -1})
	require.Equal(t, Limits{RPM: 50, TPM: 900_000, MaxConcurrency: -1, BurstFloor: 1}, s.Limits("big"))
	s.SetLimits("", Limits{TPM: 7})
	require.Equal(t, Limits{RPM: 100, TPM: 7, BurstFloor: 1}, s.Limits("anything"))
	require.Equal(t, int64(900_000), s.Limits("big").TPM, "the default does not touch configured models")
}

func TestConcurrency429(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Default: ModelConfig{Limits: Limits{RPM: 100, MaxConcurrency: 1}}, Latency: LatencyConfig{TTFT: time.Second}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := b.client.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", "hi", 5))
		done <- err
	}()
	require.NoError(t, b.clock.BlockUntilContext(ctx, 1))
	resp, err := b.client.CreateChatCompletion(ctx, chatReq("gpt-4o-mini", "hi", 5))
	e := apiErr(t, err)
	require.Equal(t, 429, e.HTTPStatusCode)
	require.Equal(t, "requests", e.Type)
	require.Equal(t, "rate_limit_exceeded", e.Code)
	require.Equal(t, "Rate limit reached for gpt-4o-mini in organization org-llmqsim on concurrent requests: Limit 1, Used 1, Requested 1. Please try again in 1s. Visit https://platform.openai.com/account/rate-limits to learn more.", e.Message)
	require.Equal(t, "1", resp.Header().Get("retry-after"))
	b.clock.Advance(time.Second)
	require.NoError(t, <-done)
	require.Equal(t, int64(1), b.ts.Sim.Stats().Total.RateLimited["concurrency"])
}
