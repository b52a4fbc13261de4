package worker

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// Upstream makes the worker's chat completion calls. It must be safe for
// concurrent use. [OpenAIUpstream] is the implementation over go-openai;
// tests of the pipeline's mechanics may give a fake.
type Upstream interface {
	// Call sends body, a chat completion request whose "model" is model
	// (llmq.Job.WithModel), once, and returns the classified reply. Every
	// failure, a cancelled ctx included, is a Reply whose Outcome says what
	// it was; Call has no error of its own.
	Call(ctx context.Context, model string, body []byte) Reply
}

// Reply is the result of one upstream call.
type Reply struct {
	// Outcome classifies the call: its class, HTTP status, error code and
	// message, and the rate-limit headers (see Classify).
	Outcome Outcome
	// Body is the answer as the upstream sent it, one JSON value. Set on
	// success only.
	Body []byte
	// PromptTokens and CompletionTokens are the answer's usage. Set on
	// success only.
	PromptTokens, CompletionTokens int
}

// OpenAIUpstream is the Upstream of an OpenAI-compatible API reached through
// client (see NewOpenAIClient). provider selects the error dialect Classify
// reads; anything but ProviderDashScope reads as OpenAI's.
func OpenAIUpstream(client *openai.Client, provider Provider) Upstream {
	return &openAIUpstream{client: client, provider: provider}
}

type openAIUpstream struct {
	client   *openai.Client
	provider Provider
}

func (u *openAIUpstream) Call(ctx context.Context, model string, body []byte) Reply {
	if s := sinkOf(ctx); s != nil {
		return u.callStream(ctx, model, body, s)
	}
	x := &exchange{request: body}
	// go-openai only needs the model from the struct: the bytes sent are
	// the exchange's, the job's own body.
	resp, err := u.client.CreateChatCompletion(withExchange(ctx, x), openai.ChatCompletionRequest{Model: model})
	r := Reply{Outcome: Classify(err, resp.Header(), u.provider)}
	if r.Outcome.Class != ClassSuccess {
		return r
	}
	if x.read {
		// The transport read the answer and its usage; go-openai decoded
		// nothing of it.
		r.Body, r.PromptTokens, r.CompletionTokens = bytes.TrimSpace(x.response.Bytes()), x.usage.PromptTokens, x.usage.CompletionTokens
		return r
	}
	r.PromptTokens, r.CompletionTokens = resp.Usage.PromptTokens, resp.Usage.CompletionTokens
	// The answer as it came, or as go-openai decoded it when the raw bytes
	// are not one JSON value.
	if r.Body = bytes.TrimSpace(x.response.Bytes()); !json.Valid(r.Body) {
		if r.Body, err = json.Marshal(resp); err != nil {
			r.Outcome = Outcome{Class: ClassPermanent, Status: r.Outcome.Status, Code: "invalid_response",
				Message: errorText(r.Outcome.Status, err.Error()), Err: err}
		}
	}
	return r
}

// UpstreamConfig says how to reach the OpenAI-compatible API.
type UpstreamConfig struct {
	// BaseURL is the API root, e.g. "https://api.openai.com/v1". Required.
	BaseURL string
	// APIKey is sent as "Authorization: Bearer". Required.
	APIKey string
	// Timeout bounds one call. Default 60s. The DashScope wait is added on top.
	Timeout time.Duration
	// DashScopeWaitTimeout, when > 0, is sent as X-DashScope-Wait-Timeout
	// (whole seconds) so the server queues burst-limited requests instead of
	// answering 429, and the client timeout grows by the same amount.
	DashScopeWaitTimeout time.Duration
	// MaxResponseBytes bounds the body of one answer, success or error,
	// as read (after any gzip is inflated): a larger one fails the call for
	// good (ResponseTooLargeError). Default MaxResponseBytesDefault; -1 = no
	// bound. Whatever the bound, the client reads at most largeAnswers
	// answers past their first largeAnswerBytes at a time (the others wait
	// their turn), so many large answers at once (a hostile upstream's
	// bombs on every call) cost a few bounds of memory, not one per call.
	MaxResponseBytes int64
	// Transport is the HTTP transport; nil means a clone of
	// http.DefaultTransport that asks for no compression, with enough idle
	// connections per host for the worker's concurrency.
	Transport http.RoundTripper
	// NameCalls sends HeaderJob and HeaderTenant with each call made for
	// a job (callheaders.go); off, the provider is told neither.
	NameCalls bool
}

// UpstreamTimeoutDefault bounds one upstream call.
const UpstreamTimeoutDefault = 60 * time.Second

// MaxResponseBytesDefault bounds an upstream answer's body: a chat
// completion is kilobytes; 8 MiB leaves room for n > 1 and logprobs.
const MaxResponseBytesDefault = 8 << 20

// NewOpenAIClient builds the go-openai client the worker calls through
// (wrap it with OpenAIUpstream) and the batch lane uses. go-openai has no
// per-call headers, so the DashScope wait header travels in a RoundTripper.
func NewOpenAIClient(c UpstreamConfig) *openai.Client {
	cfg := openai.DefaultConfig(c.APIKey)
	cfg.BaseURL = c.BaseURL
	rt := c.Transport
	if rt == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// Not asked for, gzip is not inflated out of sight: a body a
		// server compresses anyway is inflated under the bound
		// (passthroughTransport).
		t.DisableCompression = true
		t.MaxIdleConns = 1024
		t.MaxIdleConnsPerHost = 1024
		rt = t
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = UpstreamTimeoutDefault
	}
	if c.DashScopeWaitTimeout > 0 {
		rt = &headerTransport{
			base:  rt,
			name:  "X-DashScope-Wait-Timeout",
			value: strconv.Itoa(int(c.DashScopeWaitTimeout.Round(time.Second) / time.Second)),
		}
		timeout += c.DashScopeWaitTimeout
	}
	if c.NameCalls {
		rt = &callHeaderTransport{base: rt}
	}
	rt = &headerTransport{base: rt, name: HeaderHop, value: "1"}
	limit := cmp.Or(c.MaxResponseBytes, MaxResponseBytesDefault)
	cfg.HTTPClient = &http.Client{Transport: &passthroughTransport{base: rt, limit: limit,
		large: make(chan struct{}, largeAnswers)}, Timeout: timeout}
	return openai.NewClientWithConfig(cfg)
}

// HeaderHop marks every request the worker makes upstream. An llmq
// gateway refuses a request that carries it: a worker whose upstream is an
// llmq API would make each of its calls another job.
const HeaderHop = "X-Llmq-Hop"

// exchange carries one call's bytes past go-openai, which only speaks
// structs: the job's body is sent as the producer wrote it (passed through
// unchanged except "model", docs/architecture.md), and the upstream's answer
// is kept as it came, so the stored result loses no field the client library
// does not know.
type exchange struct {
	request  []byte
	response bytes.Buffer
	// read is set when the transport read a successful answer whole and
	// took its usage from it (readAnswer): go-openai was handed an empty
	// object instead of decoding the answer into a struct the worker does
	// not use.
	read  bool
	usage answerUsage
	// stream is set for a streamed call (stream.go): its answer is read
	// as it comes, and header keeps the answer's headers, which
	// go-openai drops on a stream's error.
	stream bool
	header http.Header
}

// answerUsage is all the worker reads of a successful answer.
type answerUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// readAnswer reads the successful answer body (already bounded) whole into
// the exchange. When it is one JSON value whose usage reads, go-openai gets
// an empty object to decode in its place; when it is not, the bytes, to
// decode or fail on as it would have on the body itself; when reading it
// failed (past the bound, a connection cut), the error.
func (x *exchange) readAnswer(resp *http.Response) {
	if resp.ContentLength > 0 && resp.ContentLength < largeAnswerBytes {
		x.response.Grow(int(resp.ContentLength) + bytes.MinRead)
	}
	body := resp.Body
	_, err := x.response.ReadFrom(body)
	var answer struct {
		Usage answerUsage `json:"usage"`
	}
	switch {
	case err != nil:
		x.response = bytes.Buffer{}
		resp.Body = teeReadCloser{Reader: errorReader{err}, Closer: body}
	case json.Unmarshal(x.response.Bytes(), &answer) != nil:
		resp.Body = teeReadCloser{Reader: bytes.NewReader(x.response.Bytes()), Closer: body}
	default:
		x.read, x.usage = true, answer.Usage
		resp.Body = teeReadCloser{Reader: strings.NewReader("{}"), Closer: body}
	}
}

// errorReader fails every read with err.
type errorReader struct{ err error }

func (r errorReader) Read([]byte) (int, error) { return 0, r.err }

type exchangeKey struct{}

func withExchange(ctx context.Context, x *exchange) context.Context {
	return context.WithValue(ctx, exchangeKey{}, x)
}

// passthroughTransport swaps in the request bytes of the call's exchange,
// bounds every response body to limit bytes (< 0: no bound), inflating a
// gzip body the transport left compressed, and reads a successful body into
// the exchange (exchange.readAnswer). A body read past largeAnswerBytes holds one of the large
// slots until it is closed.
type passthroughTransport struct {
	base  http.RoundTripper
	limit int64
	large chan struct{}
}

const (
	// largeAnswerBytes is the size past which reading an answer takes a
	// large slot: a chat completion of 16k output tokens.
	largeAnswerBytes = 64 << 10
	// largeAnswers is the number of large slots of a client.
	largeAnswers = 2
)

func (t *passthroughTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	x, _ := r.Context().Value(exchangeKey{}).(*exchange)
	if x == nil {
		return t.base.RoundTrip(r)
	}
	if x.request != nil {
		// A shallow copy: only the body changes (Clone would copy the
		// headers too).
		c := *r
		r = &c
		body := x.request
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		r.ContentLength = int64(len(body))
	}
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	if err := t.bound(r.Context(), resp, !x.stream); err != nil {
		return nil, err
	}
	if x.stream {
		x.header = resp.Header
	} else if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		x.readAnswer(resp)
	}
	return resp, nil
}

// bound wraps resp's body in the limit, inflating it first when the server
// gzipped it unasked (the inflated bytes are what the limit counts). A
// stream (whole is false) is read as it comes, without a large slot.
func (t *passthroughTransport) bound(ctx context.Context, resp *http.Response, whole bool) error {
	var r io.Reader = resp.Body
	if !resp.Uncompressed && strings.EqualFold(strings.TrimSpace(resp.Header.Get("Content-Encoding")), "gzip") {
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			_ = resp.Body.Close()
			return fmt.Errorf("worker: upstream answer (HTTP %d): gzip: %w", resp.StatusCode, err)
		}
		r = zr
		resp.Header.Del("Content-Encoding")
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
		resp.Uncompressed = true
	}
	lr := &limitReader{r: r, left: t.limit, limit: t.limit, status: resp.StatusCode, ctx: ctx}
	if whole {
		lr.large = t.large
	}
	body := resp.Body
	resp.Body = teeReadCloser{Reader: lr, Closer: closerFunc(func() error {
		lr.release()
		return body.Close()
	})}
	return nil
}

// limitReader reads from r until left bytes are read (limit < 0: no
// bound), then fails with a *ResponseTooLargeError: a body cut short must
// not pass for a whole one. Past largeAnswerBytes it reads holding a large
// slot, waited for until ctx ends.
type limitReader struct {
	r      io.Reader
	left   int64
	limit  int64
	status int
	ctx    context.Context
	read   int64
	large  chan struct{}
	held   bool
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.limit >= 0 && l.left < 0 {
		return 0, &ResponseTooLargeError{Status: l.status, Limit: l.limit}
	}
	if l.large != nil && l.read >= largeAnswerBytes && !l.held {
		select {
		case l.large <- struct{}{}:
			l.held = true
		case <-l.ctx.Done():
			return 0, l.ctx.Err()
		}
	}
	if l.limit >= 0 && int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.r.Read(p)
	l.read += int64(n)
	l.left -= int64(n)
	if l.limit >= 0 && l.left < 0 {
		return n + int(l.left), &ResponseTooLargeError{Status: l.status, Limit: l.limit}
	}
	return n, err
}

// release gives back the large slot the reader holds, if any.
func (l *limitReader) release() {
	if l.held {
		l.held = false
		<-l.large
	}
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

type teeReadCloser struct {
	io.Reader
	io.Closer
}

// headerTransport adds one header to every request.
type headerTransport struct {
	base        http.RoundTripper
	name, value string
}

func (t *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(t.name, t.value)
	return t.base.RoundTrip(r)
}
