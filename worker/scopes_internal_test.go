package worker

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/shaping"
)

// TestScopesConcurrency: a tenant's scope is made on first use, admits as
// many calls at once as its concurrency, and a release wakes the
// dispatchers; a change of the tenants applies to it at once.
func TestScopesConcurrency(t *testing.T) {
	t.Parallel()
	_, err := newScopes(scopesConfig{})
	require.ErrorContains(t, err, "Tenants and Metrics are required")
	ts := llmq.Tenants{"acme": {Scope: llmq.Scope{Concurrency: 1}}}
	ss, err := newScopes(scopesConfig{Tenants: func() llmq.Tenants { return ts },
		Metrics: newScopeMetrics(prometheus.NewRegistry()), Clock: clockwork.NewFakeClock()})
	require.NoError(t, err)
	require.Nil(t, ss.scopesOf("other", ""), "a tenant without a quota has no scope")
	scs := ss.scopesOf("acme", "")
	require.Len(t, scs, 1)
	require.Same(t, scs[0], ss.scopesOf("acme", "")[0], "made once")
	ticket := &ticket{req: shaping.Request{PromptTokens: 10}, scopes: scs}
	ok, _ := ss.scopeReady(ticket)
	require.True(t, ok)
	ok, retry := ss.scopeReady(ticket)
	require.False(t, ok, "its one call is taken")
	require.True(t, retry.IsZero(), "asked again at a release")
	woken := ss.changed()
	ss.releaseScopes(scs)
	select {
	case <-woken:
	case <-time.After(10 * time.Second):
		t.Fatal("a release did not wake the dispatchers")
	}
	ts = llmq.Tenants{"acme": {Scope: llmq.Scope{Concurrency: 2}}}
	ss.tenantsChanged()
	require.Equal(t, int64(2), scs[0].limit.Load(), "reconfigured in place")
}
