package worker

import (
	"context"
	"net/http"
	"net/url"
)

// The headers that name the job of each upstream call: a provider (or the
// simulator, or a proxy in front of either) can count calls per job and
// per tenant, and an operator can match a provider's log line to a job;
// sent only when UpstreamConfig.NameCalls asks. Values are query-escaped: a job id may hold any character, a header
// value may not.
const (
	HeaderJob    = "X-Llmq-Job"
	HeaderTenant = "X-Llmq-Tenant"
)

type callOfKey struct{}

// callOf is the job a call is made for.
type callOf struct{ tenant, id string }

// withCallOf returns ctx carrying the job (tenant, id) its calls are for.
func withCallOf(ctx context.Context, tenant, id string) context.Context {
	return context.WithValue(ctx, callOfKey{}, callOf{tenant: tenant, id: id})
}

// callHeaderTransport sets HeaderJob and HeaderTenant from the request's
// context (withCallOf); a request without one goes as it is.
type callHeaderTransport struct{ base http.RoundTripper }

func (t *callHeaderTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c, ok := r.Context().Value(callOfKey{}).(callOf)
	if !ok {
		return t.base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Header.Set(HeaderJob, url.QueryEscape(c.id))
	r.Header.Set(HeaderTenant, url.QueryEscape(c.tenant))
	return t.base.RoundTrip(r)
}
