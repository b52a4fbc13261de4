package worker

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCallHeaders: with NameCalls, a call made for a job names it
// upstream (id and tenant, query-escaped: any id is a valid header value);
// one made for no job (the batch lane's) carries neither header, nor does
// any call without NameCalls.
func TestCallHeaders(t *testing.T) {
	t.Parallel()
	got := make(chan http.Header, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}`))
	}))
	t.Cleanup(srv.Close)
	up := OpenAIUpstream(NewOpenAIClient(UpstreamConfig{BaseURL: srv.URL + "/v1", APIKey: "sk-test", NameCalls: true}), ProviderOpenAI)
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)

	r := up.Call(withCallOf(context.Background(), "acme corp", "job/1\névé"), "m", body)
	require.Equal(t, ClassSuccess, r.Outcome.Class, r.Outcome.Message)
	h := <-got
	require.Equal(t, "job%2F1%0A%C3%A9v%C3%A9", h.Get(HeaderJob))
	require.Equal(t, "acme+corp", h.Get(HeaderTenant))
	require.Equal(t, "1", h.Get(HeaderHop))

	r = up.Call(context.Background(), "m", body)
	require.Equal(t, ClassSuccess, r.Outcome.Class, r.Outcome.Message)
	h = <-got
	require.Empty(t, h.Values(HeaderJob))
	require.Empty(t, h.Values(HeaderTenant))

	unnamed := OpenAIUpstream(NewOpenAIClient(UpstreamConfig{BaseURL: srv.URL + "/v1", APIKey: "sk-test"}), ProviderOpenAI)
	r = unnamed.Call(withCallOf(context.Background(), "acme corp", "job-2"), "m", body)
	require.Equal(t, ClassSuccess, r.Outcome.Class, r.Outcome.Message)
	h = <-got
	require.Empty(t, h.Values(HeaderJob))
	require.Empty(t, h.Values(HeaderTenant))
	require.Equal(t, "1", h.Get(HeaderHop))
}
