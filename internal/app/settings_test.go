package app

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/worker"
)

// TestSettingsReachTheWorker: retry.fallback_on (every value config
// accepts) and upstream.max_response_bytes reach the worker's
// configurations.
func TestSettingsReachTheWorker(t *testing.T) {
	t.Parallel()
	s := &config.Config{Retry: config.Retry{FallbackOn: config.FallbackOnValues},
		Upstream: config.Upstream{MaxResponseBytes: 4096}}
	wc := &WorkerConfig{}
	require.Equal(t, worker.FallbackTriggers, workerConfig(s, wc).FallbackOn)
	require.EqualValues(t, 4096, upstreamConfig(s, wc).MaxResponseBytes)
	_, err := worker.New(workerConfig(s, wc))
	require.NotContains(t, err.Error(), "FallbackOn", "every value config accepts, the worker knows")
}

// TestPoolsReachTheWorker: each entry of a key pool reaches the worker with
// its name, limits, prices and a ledger scope of its own key (so replicas
// share each key's quota apart), and a client of its own.
func TestPoolsReachTheWorker(t *testing.T) {
	t.Parallel()
	s := &config.Config{OpenAIBaseURL: "http://127.0.0.1:8081/v1", OpenAIAPIKey: "sk-main",
		Pools: map[string][]config.PoolEntry{"m": {
			{Name: "a", BaseURL: "https://a.example/v1", Key: "sk-a", RPM: 10, TPM: 1000, Concurrency: 2},
			{Name: "b", BaseURL: "https://a.example/v1", Key: "sk-b", ContextWindow: 8000, OutputPricePer1M: 12},
		}}}
	pool := workerConfig(s, &WorkerConfig{}).Pools["m"]
	require.Len(t, pool, 2)
	require.Equal(t, worker.QuotaScopeOf("https://a.example/v1", "sk-a"), pool[0].QuotaScope)
	require.Equal(t, worker.QuotaScopeOf("https://a.example/v1", "sk-b"), pool[1].QuotaScope)
	require.NotEqual(t, pool[0].QuotaScope, pool[1].QuotaScope, "one ledger key per API key")
	require.NotNil(t, pool[0].Upstream)
	require.NotSame(t, pool[0].Upstream, pool[1].Upstream)
	pool[0].Upstream, pool[1].Upstream = nil, nil
	pool[0].QuotaScope, pool[1].QuotaScope = "", ""
	require.Equal(t, []worker.PoolEntry{{Name: "a", RPM: 10, TPM: 1000, Concurrency: 2},
		{Name: "b", ContextWindow: 8000, OutputPricePer1M: 12}}, pool)
	require.Nil(t, workerConfig(&config.Config{}, &WorkerConfig{}).Pools, "no pool: the single upstream")
}

// TestSettingsReachTheAPI: the gateway's bounds and the rate limits reach
// the API's configuration.
func TestSettingsReachTheAPI(t *testing.T) {
	t.Parallel()
	s := &config.Config{Gateway: config.Gateway{MaxDeadline: 20 * time.Minute, MaxWaiting: 64},
		RateLimits: config.RateLimits{KeyRPM: 1, TenantRPM: 2, AuthFailuresPerMinute: 3, TrustedProxyHeader: "X-Real-IP", MaxClients: 4}}
	require.Equal(t, api.GatewayConfig{MaxDeadline: 20 * time.Minute, MaxWaiting: 64}, gatewayConfig(s))
	require.Equal(t, api.RateLimitConfig{KeyRPM: 1, TenantRPM: 2, AuthFailuresPerMinute: 3, TrustedProxyHeader: "X-Real-IP",
		MaxClients: 4}, rateLimitConfig(s))
}
