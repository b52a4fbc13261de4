package worker

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

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
	// Provider selects the error dialect. Default ProviderOpenAI.
	Provider Provider
	// Transport is the HTTP transport; nil means a clone of
	// http.DefaultTransport with enough idle connections per host for the
	// worker's concurrency.
	Transport http.RoundTripper
}

// UpstreamTimeoutDefault bounds one upstream call.
const UpstreamTimeoutDefault = 60 * time.Second

// NewOpenAIClient builds the go-openai client the worker calls through.
// go-openai has no per-call headers, so the DashScope wait header travels in
// a RoundTripper (platform notes).
func NewOpenAIClient(c UpstreamConfig) *openai.Client {
	cfg := openai.DefaultConfig(c.APIKey)
	cfg.BaseURL = c.BaseURL
	rt := c.Transport
	if rt == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
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
	cfg.HTTPClient = &http.Client{Transport: &passthroughTransport{base: rt}, Timeout: timeout}
	return openai.NewClientWithConfig(cfg)
}

// exchange carries one call's bytes past go-openai, which only speaks
// structs: the job's body is sent as the producer wrote it (DESIGN: passed
// through unchanged except "model"), and the upstream's answer is kept as
// it came, so the stored result loses no field the client library does not
// know.
type exchange struct {
	request  []byte
	response bytes.Buffer
}

type exchangeKey struct{}

func withExchange(ctx context.Context, x *exchange) context.Context {
	return context.WithValue(ctx, exchangeKey{}, x)
}

// passthroughTransport swaps in the request bytes of the call's exchange
// and tees the response body into it.
type passthroughTransport struct{ base http.RoundTripper }

func (t *passthroughTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	x, _ := r.Context().Value(exchangeKey{}).(*exchange)
	if x == nil {
		return t.base.RoundTrip(r)
	}
	if x.request != nil {
		r = r.Clone(r.Context())
		body := x.request
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		r.ContentLength = int64(len(body))
	}
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = teeReadCloser{Reader: io.TeeReader(resp.Body, &x.response), Closer: resp.Body}
	return resp, nil
}

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
