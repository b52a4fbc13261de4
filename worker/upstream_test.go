package worker_test

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/redact"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/worker"
)

// TestDashScopeWaitHeaderAndTimeout checks that the wait header travels on
// every call and that the client timeout grows by the wait: a server that
// answers after 300 ms fails a 200 ms client, but not one with a 1 s wait.
func TestDashScopeWaitHeaderAndTimeout(t *testing.T) {
	t.Parallel()
	got := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("X-DashScope-Wait-Timeout")
		time.Sleep(300 * time.Millisecond) // the slow upstream under test, not a wait for correctness
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(openai.ChatCompletionResponse{ID: "chatcmpl-1", Object: "chat.completion"})
	}))
	t.Cleanup(srv.Close)
	req := openai.ChatCompletionRequest{Model: "qwen-plus", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "hi"}}}

	plain := worker.NewOpenAIClient(worker.UpstreamConfig{BaseURL: srv.URL + "/v1", APIKey: "k", Timeout: 200 * time.Millisecond})
	_, err := plain.CreateChatCompletion(context.Background(), req)
	require.Error(t, err, "300 ms answer, 200 ms timeout")
	require.Equal(t, "", <-got)

	waiting := worker.NewOpenAIClient(worker.UpstreamConfig{BaseURL: srv.URL + "/v1", APIKey: "k",
		Timeout: 200 * time.Millisecond, DashScopeWaitTimeout: time.Second})
	resp, err := waiting.CreateChatCompletion(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, "chatcmpl-1", resp.ID)
	require.Equal(t, "1", <-got)
}

// TestBodyPassesThroughAndRawResultIsStored checks DESIGN's contract: the
// job's body reaches the upstream unchanged (fields go-openai does not know
// included), and the stored result is the upstream's JSON as it came.
func TestBodyPassesThroughAndRawResultIsStored(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 12})
	seen := make(chan map[string]any, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		seen <- body
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"chatcmpl-raw","object":"chat.completion","created":1,"model":"m",` +
			`"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop","logprobs":null}],` +
			`"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4},"x_vendor":{"region":"eu"}}`))
	}))
	t.Cleanup(srv.Close)
	tb.start(t, func(c *worker.Config) {
		c.Upstream = upstreamAt(srv.URL+"/v1", 5*time.Second)
	})
	tb.publish(t, []byte(`{"id":"pt-1","body":{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":5,"x_param":{"keep":true}}}`))
	rec := tb.waitTerminal(t, []string{"pt-1"}, 20*time.Second)["pt-1"]
	require.Equal(t, llmq.StatusSucceeded, rec.Status)
	body := <-seen
	require.Equal(t, map[string]any{"keep": true}, body["x_param"], "unknown request fields pass through")
	require.Equal(t, "m", body["model"])
	var stored map[string]any
	require.NoError(t, json.Unmarshal(rec.Result, &stored))
	require.Equal(t, map[string]any{"region": "eu"}, stored["x_vendor"], "unknown response fields are kept")
	require.Equal(t, 3, rec.PromptTokens)
}

// TestOpenAIUpstreamCall sends one request through OpenAIUpstream to the
// simulator per case and checks the classified reply.
func TestOpenAIUpstreamCall(t *testing.T) {
	t.Parallel()
	faults := func(kind upstreamsim.FaultKind) upstreamsim.FaultConfig {
		return upstreamsim.FaultConfig{Rates: map[upstreamsim.FaultKind]float64{kind: 1}}
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name     string
		sim      upstreamsim.Config
		provider worker.Provider
		ctx      context.Context
		class    worker.Class
		status   int
		code     string
		// retryAfter is the Retry-After the reply's headers carry.
		retryAfter time.Duration
	}{
		{name: "success", class: worker.ClassSuccess, status: 200},
		{name: "slow_down 429 with Retry-After", sim: upstreamsim.Config{Faults: faults(upstreamsim.FaultSlowDown)},
			class: worker.ClassRateLimited, status: 429, code: "slow_down", retryAfter: time.Second},
		{name: "insufficient_quota is billing on OpenAI", sim: upstreamsim.Config{Faults: faults(upstreamsim.FaultInsufficientQuota)},
			class: worker.ClassPermanent, status: 429, code: "insufficient_quota"},
		{name: "insufficient_quota is TPM on DashScope", sim: upstreamsim.Config{Faults: faults(upstreamsim.FaultInsufficientQuota)},
			provider: worker.ProviderDashScope, class: worker.ClassRateLimited, status: 429, code: "insufficient_quota"},
		{name: "500", sim: upstreamsim.Config{Faults: faults(upstreamsim.FaultServerError)},
			class: worker.ClassRetryable, status: 500, code: "server_error"},
		{name: "502 html page", sim: upstreamsim.Config{Faults: faults(upstreamsim.FaultBadGateway)},
			class: worker.ClassRetryable, status: 502, code: "http_502"},
		{name: "connection reset", sim: upstreamsim.Config{Faults: faults(upstreamsim.FaultConnectionReset)},
			class: worker.ClassRetryable, code: "connection_error"},
		{name: "cancelled", ctx: cancelled, class: worker.ClassRetryable, code: "cancelled"},
	}
	body := []byte(`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sim := upstreamsim.NewTestServer(t, tt.sim)
			up := worker.OpenAIUpstream(worker.NewOpenAIClient(worker.UpstreamConfig{BaseURL: sim.URL, APIKey: "k", Timeout: 5 * time.Second}),
				cmp.Or(tt.provider, worker.ProviderOpenAI))
			r := up.Call(cmp.Or(tt.ctx, context.Background()), "m", body)
			require.Equal(t, tt.class, r.Outcome.Class, "%s: %v", r.Outcome.Class, r.Outcome.Err)
			require.Equal(t, tt.status, r.Outcome.Status)
			require.Equal(t, tt.code, r.Outcome.Code)
			require.Equal(t, tt.retryAfter, r.Outcome.Headers.RetryAfter)
			if tt.class != worker.ClassSuccess {
				require.Nil(t, r.Body)
				require.Zero(t, r.PromptTokens+r.CompletionTokens)
				return
			}
			var got struct {
				Object string `json:"object"`
				Usage  struct {
					PromptTokens     int `json:"prompt_tokens"`
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			require.NoError(t, json.Unmarshal(r.Body, &got), "the body is the upstream's JSON")
			require.Equal(t, "chat.completion", got.Object)
			require.Equal(t, got.Usage.PromptTokens, r.PromptTokens)
			require.Equal(t, got.Usage.CompletionTokens, r.CompletionTokens)
			require.Positive(t, r.PromptTokens)
			require.EqualValues(t, 1, sim.Sim.Stats().Total.Succeeded)
		})
	}
}

// TestOpenAIUpstreamReadsTheAnswer: a successful answer is stored byte for
// byte (only the surrounding whitespace trimmed) with the usage it states
// when the transport reads it (one JSON value whose usage reads: its other
// fields are not decoded); otherwise go-openai decodes it as before (a
// value followed by junk is stored as decoded; a usage that does not read
// fails the call as go-openai's decode does).
func TestOpenAIUpstreamReadsTheAnswer(t *testing.T) {
	t.Parallel()
	const answer = `{"id":"chatcmpl-x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}],` +
		`"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9},"x_vendor":{"region":"eu"}}`
	tests := []struct {
		name, sent string
		class      worker.Class
		code       string
		body       string
		// prompt and completion are the reply's usage.
		prompt, completion int
	}{
		{name: "read by the transport", sent: " \n" + answer + "\n", class: worker.ClassSuccess, body: answer, prompt: 7, completion: 2},
		{name: "a field go-openai would not decode: only the usage is read", sent: `{"id":5,"usage":{"prompt_tokens":3,"completion_tokens":1}}`,
			class: worker.ClassSuccess, body: `{"id":5,"usage":{"prompt_tokens":3,"completion_tokens":1}}`, prompt: 3, completion: 1},
		{name: "no usage", sent: `{"id":"chatcmpl-y"}`, class: worker.ClassSuccess, body: `{"id":"chatcmpl-y"}`},
		{name: "junk after the value: go-openai's decode", sent: `{"id":"z","usage":{"prompt_tokens":5,"completion_tokens":1}} junk`,
			class: worker.ClassSuccess, prompt: 5, completion: 1},
		{name: "usage that does not read", sent: `{"usage":{"prompt_tokens":"5"}}`, class: worker.ClassPermanent, code: "client_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, tt.sent)
			}))
			t.Cleanup(srv.Close)
			up := worker.OpenAIUpstream(worker.NewOpenAIClient(worker.UpstreamConfig{BaseURL: srv.URL + "/v1", APIKey: "k",
				Timeout: 5 * time.Second}), worker.ProviderOpenAI)
			r := up.Call(context.Background(), "m", []byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`))
			require.Equal(t, tt.class, r.Outcome.Class, "%v", r.Outcome.Err)
			require.Equal(t, tt.code, r.Outcome.Code)
			require.Equal(t, tt.prompt, r.PromptTokens)
			require.Equal(t, tt.completion, r.CompletionTokens)
			switch {
			case tt.class != worker.ClassSuccess:
				require.Nil(t, r.Body)
			case tt.body != "":
				require.Equal(t, tt.body, string(r.Body))
			default:
				var got openai.ChatCompletionResponse
				require.NoError(t, json.Unmarshal(r.Body, &got), "%s", r.Body)
				require.Equal(t, "z", got.ID)
				require.Equal(t, 5, got.Usage.PromptTokens)
			}
		})
	}
}

// bomb answers every call with status and a body of about inflated bytes:
// a chat completion whose content never ends, gzipped unasked when gzipped
// (gzip members of 16 MiB each, 4 GiB from 4 MB), plain otherwise. It
// counts the calls and the bytes it wrote.
type bomb struct {
	status   int
	inflated int64
	gzipped  bool
	calls    atomic.Int64
	written  atomic.Int64
}

// bombMember is one gzip member of 16 MiB of 'A's.
var bombMember = sync.OnceValue(func() []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	_, _ = zw.Write(bytes.Repeat([]byte("A"), 16<<20))
	_ = zw.Close()
	return buf.Bytes()
})

const bombHead = `{"id":"chatcmpl-bomb","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"`

func (b *bomb) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.calls.Add(1)
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	if b.gzipped {
		w.Header().Set("Content-Encoding", "gzip")
	}
	w.WriteHeader(b.status)
	write := func(p []byte) bool {
		n, err := w.Write(p)
		b.written.Add(int64(n))
		return err == nil
	}
	if b.gzipped {
		var head bytes.Buffer
		zw := gzip.NewWriter(&head)
		_, _ = zw.Write([]byte(bombHead))
		_ = zw.Close()
		if !write(head.Bytes()) {
			return
		}
		for n := int64(0); n < b.inflated; n += 16 << 20 {
			if !write(bombMember()) {
				return
			}
		}
		return
	}
	chunk := bytes.Repeat([]byte("A"), 64<<10)
	if !write([]byte(bombHead)) {
		return
	}
	for n := int64(0); n < b.inflated; n += int64(len(chunk)) {
		if !write(chunk) {
			return
		}
	}
}

// TestUpstreamBoundsHostileAnswers: a gzip bomb (4 GiB inflated from
// 4 MB, on a 200 and on a 500) and huge plain bodies (success and a 502
// error page) are read no further than the bound: each call fails for
// good with response_too_large and the worker's heap stays bounded (the
// bytes allocated by the call are measured). Not parallel: the other
// tests' allocations would count.
func TestUpstreamBoundsHostileAnswers(t *testing.T) {
	const limit = worker.MaxResponseBytesDefault
	tests := []struct {
		name string
		bomb *bomb
	}{
		{"gzip bomb 200", &bomb{status: 200, inflated: 4 << 30, gzipped: true}},
		{"gzip bomb 500", &bomb{status: 500, inflated: 4 << 30, gzipped: true}},
		{"huge answer 200", &bomb{status: 200, inflated: 1 << 30}},
		{"huge error page 502", &bomb{status: 502, inflated: 1 << 30}},
	}
	body := []byte(`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`)
	bombMember() // compressed before the measures
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.bomb)
			t.Cleanup(srv.Close)
			up := worker.OpenAIUpstream(worker.NewOpenAIClient(worker.UpstreamConfig{BaseURL: srv.URL + "/v1", APIKey: "k",
				Timeout: 30 * time.Second}), worker.ProviderOpenAI)
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			r := up.Call(context.Background(), "m", body)
			runtime.ReadMemStats(&after)
			allocated := after.TotalAlloc - before.TotalAlloc
			t.Logf("allocated %d MiB by the call; heap in use %d MiB after it", allocated>>20, after.HeapInuse>>20)
			require.Equal(t, worker.ClassPermanent, r.Outcome.Class, "%v", r.Outcome.Err)
			require.Equal(t, worker.CodeResponseTooLarge, r.Outcome.Code)
			require.Equal(t, tt.bomb.status, r.Outcome.Status)
			require.Equal(t, fmt.Sprintf("HTTP %d: the upstream's answer (HTTP %d) is larger than the limit of %d bytes (upstream.max_response_bytes)",
				tt.bomb.status, tt.bomb.status, limit), r.Outcome.Message)
			require.Nil(t, r.Body)
			require.Less(t, allocated, uint64(12*limit), "the answer is read no further than the bound")
			require.EqualValues(t, 1, tt.bomb.calls.Load())
		})
	}
}

// TestUpstreamBoundsManyHostileAnswersAtOnce: 40 calls at once (8 under
// the race detector), each answered by a 502 of 1 GiB: each fails at the
// bound, and the heap's peak stays that of a few answers, not of 40 (no
// more than a few are read past their first 64 KiB at a time). Not
// parallel: it measures the heap, collected often so that the peak is what
// is live.
func TestUpstreamBoundsManyHostileAnswersAtOnce(t *testing.T) {
	const calls = 40 / slowdown
	defer debug.SetGCPercent(debug.SetGCPercent(20))
	srv := httptest.NewServer(&bomb{status: 502, inflated: 1 << 30})
	t.Cleanup(srv.Close)
	up := worker.OpenAIUpstream(worker.NewOpenAIClient(worker.UpstreamConfig{BaseURL: srv.URL + "/v1", APIKey: "k",
		Timeout: slowdown * 30 * time.Second}), worker.ProviderOpenAI)
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	stop, sampled := make(chan struct{}), make(chan uint64)
	go func() {
		var peak uint64
		tick := time.NewTicker(5 * time.Millisecond) // sampling the heap, not waiting for an outcome
		defer tick.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapInuse)
			select {
			case <-stop:
				sampled <- peak
				return
			case <-tick.C:
			}
		}
	}()
	codes := make(chan string, calls)
	var wg sync.WaitGroup
	for range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- up.Call(context.Background(), "m", body).Outcome.Code
		}()
	}
	wg.Wait()
	close(stop)
	peak := <-sampled
	close(codes)
	for code := range codes {
		require.Equal(t, worker.CodeResponseTooLarge, code)
	}
	grew := int64(peak) - int64(base.HeapInuse)
	t.Logf("heap in use: %d MiB before, %d MiB at the peak of %d hostile answers at once", base.HeapInuse>>20, peak>>20, calls)
	require.Less(t, grew, int64(16*worker.MaxResponseBytesDefault), "a few answers' worth, not %d", calls)
}

// TestUpstreamInflatesAGzippedAnswerUnderTheBound: a server that gzips a
// normal answer unasked is still understood, and the bound counts the
// inflated bytes: 100 bytes compressed are refused under a 64-byte bound.
func TestUpstreamInflatesAGzippedAnswerUnderTheBound(t *testing.T) {
	t.Parallel()
	answer := `{"id":"chatcmpl-z","object":"chat.completion","created":1,"model":"m",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Empty(t, r.Header.Get("Accept-Encoding"), "no compression is asked for")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		_, _ = zw.Write([]byte(answer))
		_ = zw.Close()
	}))
	t.Cleanup(srv.Close)
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	up := worker.OpenAIUpstream(worker.NewOpenAIClient(worker.UpstreamConfig{BaseURL: srv.URL + "/v1", APIKey: "k"}), worker.ProviderOpenAI)
	r := up.Call(context.Background(), "m", body)
	require.Equal(t, worker.ClassSuccess, r.Outcome.Class, "%v", r.Outcome.Err)
	require.JSONEq(t, answer, string(r.Body))
	require.Equal(t, 3, r.PromptTokens)

	small := worker.OpenAIUpstream(worker.NewOpenAIClient(worker.UpstreamConfig{BaseURL: srv.URL + "/v1", APIKey: "k",
		MaxResponseBytes: 64}), worker.ProviderOpenAI)
	r = small.Call(context.Background(), "m", body)
	require.Equal(t, worker.CodeResponseTooLarge, r.Outcome.Code)
	require.Equal(t, worker.ClassPermanent, r.Outcome.Class)
}

// TestWorkerHostileUpstream runs jobs through the pipeline against an
// upstream that answers a 502 with 64 MiB of body (failed at once with
// response_too_large, one call, never retried although a 502 is), and
// error pages that echo the request's Authorization header (400 and 502):
// the job's error and the dead letter say "HTTP <status>: ..." and hold no
// trace of the key.
func TestWorkerHostileUpstream(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 41})
	const key = "sk-live-0123456789abcdefXYZ"
	huge := &bomb{status: 502, inflated: 64 << 20}
	var calls sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Model string }
		_ = json.NewDecoder(r.Body).Decode(&req)
		n, _ := calls.LoadOrStore(req.Model, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		echo := "Authorization: Bearer " + key + "\r\nx-api-key: " + key
		switch req.Model {
		case "huge":
			huge.ServeHTTP(w, r)
		case "echo-502":
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(502)
			_, _ = io.WriteString(w, "<html><body><h1>502 Bad Gateway</h1><pre>"+echo+"</pre>"+strings.Repeat("padding ", 2000)+"</body></html>")
		case "echo-400":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(400)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
				"message": "bad request; headers were " + echo, "type": "invalid_request_error", "code": "bad\x00code"}})
		}
	}))
	t.Cleanup(srv.Close)
	tb.start(t, func(c *worker.Config) {
		c.Upstream = upstreamAt(srv.URL+"/v1", 10*time.Second)
		c.MaxAttempts = 2
	})
	tb.publish(t, jobJSON("huge", "huge", ""), jobJSON("echo-502", "echo-502", ""), jobJSON("echo-400", "echo-400", ""))
	recs := tb.waitTerminal(t, []string{"huge", "echo-502", "echo-400"}, 30*time.Second)
	count := func(model string) int64 {
		n, ok := calls.Load(model)
		require.True(t, ok, model)
		return n.(*atomic.Int64).Load()
	}

	require.Equal(t, llmq.StatusFailed, recs["huge"].Status)
	require.Equal(t, worker.CodeResponseTooLarge, recs["huge"].ErrorCode)
	require.Equal(t, fmt.Sprintf("HTTP 502: the upstream's answer (HTTP 502) is larger than the limit of %d bytes (upstream.max_response_bytes)",
		worker.MaxResponseBytesDefault), recs["huge"].ErrorMessage)
	require.EqualValues(t, 1, count("huge"), "never retried")

	require.Equal(t, llmq.StatusFailed, recs["echo-400"].Status)
	require.Equal(t, "bad code", recs["echo-400"].ErrorCode)
	require.Equal(t, "HTTP 400: bad request; headers were Authorization: "+redact.Mask+"  x-api-key: "+redact.Mask, recs["echo-400"].ErrorMessage, "%q", recs["echo-400"].ErrorMessage)
	require.EqualValues(t, 1, count("echo-400"))

	require.Equal(t, llmq.StatusDeadLettered, recs["echo-502"].Status)
	require.EqualValues(t, 2, count("echo-502"))
	letters := tb.letters.wait(t, 1)
	require.Equal(t, dlq.ReasonRetriesExhausted, letters[0].Reason)
	for _, text := range []string{recs["echo-502"].ErrorMessage, letters[0].LastError} {
		require.NotContains(t, text, "0123456789abcdef")
		require.LessOrEqual(t, len(text), redact.ErrorMaxBytes)
		require.Contains(t, text, "Authorization: "+redact.Mask)
	}
	require.Equal(t, letters[0].LastError, recs["echo-502"].ErrorMessage, "the letter's error is the job's")
	require.True(t, strings.HasPrefix(letters[0].LastError, "http_502: HTTP 502: <html><body><h1>502 Bad Gateway</h1><pre>Authorization: "+
		redact.Mask+"  x-api-key: "+redact.Mask+"</pre>padding"), letters[0].LastError)
	require.True(t, strings.HasSuffix(letters[0].LastError, redact.Truncated), "bounded")
}
