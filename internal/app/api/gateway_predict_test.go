package api_test

import (
	"context"
	"math"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/shaping"
)

// BenchmarkGatewayPrediction measures the completion predicted for a gateway
// call (store.PredictCompletion) against its actual completion, under steady
// and burst load, and logs the p50 and p90 of the relative error. A
// measurement, not a test (docs/design/gateway.md#benchmarkgatewayprediction).
// Run: go test -run '^$' -bench GatewayPrediction -benchtime 1x ./internal/app/api/
func BenchmarkGatewayPrediction(bb *testing.B) {
	for _, tc := range []struct {
		name          string
		agents, calls int
	}{{"steady", 4, 8}, {"burst", 32, 1}} {
		bb.Run(tc.name, func(t *testing.B) {
			b := gatewaySetupEnv(t, api.GatewayConfig{}, gatewayEnv{sim: upstreamsim.Config{Seed: 4, RestrictModels: true,
				APIKeys: []string{"sk-test"},
				Models:  map[string]upstreamsim.ModelConfig{"gpt-4o-mini": {Limits: upstreamsim.Limits{RPM: 300, TPM: 1_000_000, MaxConcurrency: 4}}},
				Latency: upstreamsim.LatencyConfig{TTFT: 200 * time.Millisecond, PerToken: 10 * time.Millisecond},
				Output:  upstreamsim.OutputConfig{Distribution: upstreamsim.DistUniform, Min: 10, Max: 32}},
				strategy: shaping.StrategyAdaptive})
			b.startWorker()
			ctx := context.Background()
			// The SDKs' timeouts (60 s and more), not the tests' 30 s: a
			// retry of the burst's first 429s may wait the worker's
			// longest backoff (docs/design/gateway.md#measured).
			cfg := openai.DefaultConfig(keyAcme)
			cfg.BaseURL = b.srv.URL + "/v1"
			cfg.HTTPClient = &http.Client{Timeout: 2 * time.Minute}
			c := openai.NewClientWithConfig(cfg)
			// Warm up until a lane row knows the rate.
			for range 20 {
				_, err := c.CreateChatCompletion(ctx, chatRequest("gpt-4o-mini", "warm up"))
				require.NoError(t, err)
				if p, err := b.store.LaneRates().PredictCompletion(ctx, "gpt-4o-mini", llmq.PriorityNormal, 40); err == nil && p.Known && p.Latency > 0 {
					break
				}
			}
			var (
				mu   sync.Mutex
				errs []float64
				wg   sync.WaitGroup
				// admit serialises prediction and record, as one
				// admission after another sees the jobs before it.
				admit sync.Mutex
			)
			recorded := func() int64 {
				n, err := b.store.Jobs().CountByStatus(ctx, "acme", 0)
				require.NoError(t, err)
				var sum int64
				for _, v := range n {
					sum += v
				}
				return sum
			}
			for range tc.agents {
				wg.Go(func() {
					for range tc.calls {
						admit.Lock()
						before := recorded()
						p, err := b.store.LaneRates().PredictCompletion(ctx, "gpt-4o-mini", llmq.PriorityNormal, 40)
						start := time.Now()
						called := make(chan error, 1)
						go func() {
							_, err := c.CreateChatCompletion(ctx, chatRequest("gpt-4o-mini", "how long?"))
							called <- err
						}()
						require.Eventually(t, func() bool { return recorded() > before }, 10*time.Second, 2*time.Millisecond)
						admit.Unlock()
						cerr := <-called
						took := time.Since(start)
						if err != nil || cerr != nil || !p.Known {
							t.Errorf("predict %v, call %v, known %v", err, cerr, p.Known)
							return
						}
						mu.Lock()
						errs = append(errs, math.Abs(float64(p.Wait-took))/float64(took))
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			slices.Sort(errs)
			require.NotEmpty(t, errs)
			p50, p90 := errs[len(errs)/2], errs[len(errs)*9/10]
			t.ReportMetric(100*p50, "p50-error-%")
			t.ReportMetric(100*p90, "p90-error-%")
		})
	}
}
