package app

import (
	"cmp"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/batchapi"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/internal/retention"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/worker"
)

// The settings of the configuration file, mapped onto the components'
// configurations. A zero setting stays zero: the component applies its own
// default. The caller adds what is not a setting (store, broker, logger...).

// batchConfig is the batch lane's share of the settings: window, zone,
// drain threshold, flush interval, line limit and the model catalog's prices.
func batchConfig(s *config.Config, wc *WorkerConfig) batchapi.Config {
	return batchapi.Config{
		Window:         s.Batch.Window,
		Timezone:       s.Batch.Timezone,
		DrainThreshold: s.Batch.DrainThreshold,
		FlushInterval:  s.Batch.FlushInterval,
		MaxLines:       s.Batch.MaxLines,
		PollInterval:   wc.BatchPollInterval,
		Catalog:        s.Catalog(),
	}
}

// workerConfig is the worker's share of the settings: the model catalog,
// the retry policy, the ingest window, the message limit and the quota
// scope (the upstream and its API key), with the worker's own options.
func workerConfig(s *config.Config, wc *WorkerConfig) worker.Config {
	return worker.Config{
		Catalog:         llmq.Catalog{Models: s.Models, Default: wc.DefaultModel, AllowAny: s.AllowAnyModel},
		Tenants:         s.Tenants,
		ResultsTopic:    s.Notifications.ResultsTopic,
		MaxInFlight:     wc.MaxInFlight,
		MaxAttempts:     s.Retry.MaxAttempts,
		Backoff:         worker.Backoff{Base: s.Retry.BaseDelay, Max: s.Retry.MaxDelay, MaxRetryAfter: s.Retry.MaxRetryAfter},
		IngestWindow:    s.Ingest.Window,
		TenantCap:       s.Ingest.TenantCap,
		SizeOrder:       s.Ingest.SizeOrder,
		RetryBudget:     s.Retry.Budget,
		FallbackAfter:   s.Retry.FallbackAfter,
		FallbackMaxWait: s.Retry.FallbackMaxWait,

		IncidentMinCalls:     s.Retry.IncidentMinCalls,
		IncidentFailureRatio: s.Retry.IncidentFailureRatio,
		IncidentWindow:       s.Retry.IncidentWindow,
		IncidentProbeEvery:   s.Retry.IncidentProbeEvery,
		OutageLimit:          s.Retry.OutageLimit,
		FallbackOn:           fallbackOn(s.Retry.FallbackOn),
		ShutdownTimeout:      wc.ShutdownTimeout,
		Lease:                wc.Lease,
		MaxMessageBytes:      s.MaxMessageBytes,
		QuotaScope:           worker.QuotaScopeOf(s.OpenAIBaseURL, s.OpenAIAPIKey),
		Pools:                workerPools(s, wc),
		Replica:              wc.Replica,
		LedgerPeriod:         wc.LedgerPeriod,
		CapacitySafety:       s.Capacity.Safety,
		CapacityReserved:     s.Capacity.Reserved,
		CapacityTailLatency:  s.Capacity.TailLatency,
	}
}

// workerPools are the key pools of the settings, each entry with a client
// of its own (the upstream settings of the single upstream, its base URL
// and key) and its ledger scope.
func workerPools(s *config.Config, wc *WorkerConfig) map[string][]worker.PoolEntry {
	if len(s.Pools) == 0 {
		return nil
	}
	out := make(map[string][]worker.PoolEntry, len(s.Pools))
	for model, pool := range s.Pools {
		entries := make([]worker.PoolEntry, len(pool))
		for i, e := range pool {
			uc := upstreamConfig(s, wc)
			uc.BaseURL, uc.APIKey = e.BaseURL, e.Key
			entries[i] = worker.PoolEntry{
				Name:       e.Name,
				Upstream:   worker.OpenAIUpstream(worker.NewOpenAIClient(uc), cmp.Or(wc.Provider, worker.ProviderOpenAI)),
				QuotaScope: worker.QuotaScopeOf(e.BaseURL, e.Key),
				RPM:        e.RPM, TPM: e.TPM, Concurrency: e.Concurrency, ContextWindow: e.ContextWindow,
				InputPricePer1M: e.InputPricePer1M, OutputPricePer1M: e.OutputPricePer1M,
			}
		}
		out[model] = entries
	}
	return out
}

// fallbackOn is retry.fallback_on as the worker's triggers (the values are
// the same words, checked by config.Validate).
func fallbackOn(names []string) []worker.FallbackTrigger {
	out := make([]worker.FallbackTrigger, len(names))
	for i, n := range names {
		out[i] = worker.FallbackTrigger(n)
	}
	return out
}

// storeOrder is the claim order's share of the settings: the tenants
// (weights and priority caps).
func storeOrder(s *config.Config) store.Order {
	return store.Order{Tenants: s.Tenants}
}

// jobSizer gives the jobs the producer records in its outbox their
// estimate and size delay as the worker's ingest does: the same catalog
// and size order.
func jobSizer(s *config.Config, est *shaping.Estimator) store.Sizer {
	return store.Sizer{Estimator: est, Catalog: s.Catalog(), Order: cmp.Or(s.Ingest.SizeOrder, worker.SizeOrderDefault)}
}

// upstreamConfig addresses the OpenAI-compatible upstream.
func upstreamConfig(s *config.Config, wc *WorkerConfig) worker.UpstreamConfig {
	return worker.UpstreamConfig{
		BaseURL: s.OpenAIBaseURL, APIKey: s.OpenAIAPIKey, Timeout: wc.UpstreamTimeout,
		DashScopeWaitTimeout: wc.DashScopeWaitTimeout, MaxResponseBytes: s.Upstream.MaxResponseBytes,
		NameCalls: s.Upstream.NameCalls,
	}
}

// producerConfig is the producer's share of the settings: the backpressure
// thresholds and the tenants' shares of them.
func producerConfig(s *config.Config) producer.Config {
	return producer.Config{SoftDepth: s.Backpressure.SoftDepth, HardDepth: s.Backpressure.HardDepth,
		Tenants: s.Tenants, MaxMessageBytes: s.MaxMessageBytes}
}

// gatewayConfig is the API's share of the gateway settings.
func gatewayConfig(s *config.Config) api.GatewayConfig {
	g := s.Gateway
	return api.GatewayConfig{Timeout: g.Timeout, Priority: g.Priority, CancelOnDisconnect: g.CancelOnDisconnect,
		MaxDeadline: g.MaxDeadline, MaxWaiting: g.MaxWaiting}
}

// rateLimitConfig is the API's share of the rate limit settings.
func rateLimitConfig(s *config.Config) api.RateLimitConfig {
	r := s.RateLimits
	return api.RateLimitConfig{KeyRPM: r.KeyRPM, TenantRPM: r.TenantRPM, AuthFailuresPerMinute: r.AuthFailuresPerMinute,
		TrustedProxyHeader: r.TrustedProxyHeader, MaxClients: r.MaxClients}
}

// retentionConfig is the pruner's share of the settings: the periods.
func retentionConfig(s *config.Config) retention.Config {
	r := s.Retention
	return retention.Config{Succeeded: r.Succeeded, Unsuccessful: r.Unsuccessful, DeadLetters: r.DeadLetters,
		Batches: r.Batches, Tombstones: r.Tombstones, Audit: r.Audit, Interval: r.Interval}
}

// alertConfig is the dead-letter alerter's share of the settings; ok is
// false when no sink is configured.
func alertConfig(s *config.Config) (c dlq.AlertConfig, ok bool) {
	a := s.Alerts
	return dlq.AlertConfig{
		AlertmanagerURL: a.AlertmanagerURL, WebhookURL: a.WebhookURL, Severity: a.Severity,
		GroupWait: a.GroupWait, GroupInterval: a.GroupInterval, ResolveTimeout: a.ResolveTimeout,
		MaxPerMinute: a.MaxPerMinute,
	}, cmp.Or(a.AlertmanagerURL, a.WebhookURL) != ""
}

// operatorKeys are the operator keys of the settings, with their names.
func operatorKeys(keys []config.OperatorKey) []api.OperatorKey {
	out := make([]api.OperatorKey, len(keys))
	for i, k := range keys {
		out[i] = api.OperatorKey{Name: k.Name, Key: k.Key}
	}
	return out
}
