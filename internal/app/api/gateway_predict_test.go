package api_test

import (
	"context"
	"fmt"
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
	"github.com/llmq/llmq/store"
)

// BenchmarkGatewayPrediction measures the completion predicted for a gateway
// call (store.PredictCompletion) against its actual completion, under steady
// and burst load, for each of a few simulator seeds, and logs the p50 and
// p90 of the relative error and the predictions that were floors (the
// lane's concurrency not known). A measurement, not a test
// (docs/design/gateway.md#benchmarkgatewayprediction); -v logs each call.
// Run: go test -run '^$' -bench GatewayPrediction -benchtime 1x ./internal/app/api/
func BenchmarkGatewayPrediction(bb *testing.B) {
	for _, tc := range []struct {
		name          string
		agents, calls int
		// learn: a first burst, not measured, teaches the lane the
		// provider's calls at a time.
		learn bool
	}{{"steady", 4, 8, false}, {"burst", 32, 1, true}, {"cold-burst", 32, 1, false}} {
		for _, seed := range []uint64{1, 2, 3} {
			bb.Run(fmt.Sprintf("%s/seed=%d", tc.name, seed), func(t *testing.B) {
				benchPrediction(t, seed, tc.agents, tc.calls, tc.learn)
			})
		}
	}
}

func benchPrediction(t *testing.B, seed uint64, agents, calls int, learn bool) {
	b := gatewaySetupEnv(t, api.GatewayConfig{}, gatewayEnv{sim: upstreamsim.Config{Seed: seed, RestrictModels: true,
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
	predict := func() (store.Prediction, error) {
		return b.store.LaneRates().PredictCompletion(ctx, "gpt-4o-mini", llmq.PriorityNormal, 40)
	}
	// Warm up until a lane row knows the rate.
	for range 20 {
		_, err := c.CreateChatCompletion(ctx, chatRequest("gpt-4o-mini", "warm up"))
		require.NoError(t, err)
		if p, err := predict(); err == nil && p.Known && p.Latency > 0 {
			break
		}
	}
	if learn {
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				_, err := c.CreateChatCompletion(ctx, chatRequest("gpt-4o-mini", fmt.Sprintf("learn %d", i)))
				require.NoError(t, err)
			})
		}
		wg.Wait()
		require.Eventually(t, func() bool {
			p, err := predict()
			return err == nil && p.Concurrency > 0
		}, 10*time.Second, 10*time.Millisecond)
	}
	var (
		mu     sync.Mutex
		errs   []float64
		floors int
		wg     sync.WaitGroup
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
	for range agents {
		wg.Go(func() {
			for range calls {
				admit.Lock()
				before := recorded()
				p, err := predict()
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
				if p.Concurrency == 0 {
					floors++
				}
				if testing.Verbose() {
					t.Logf("call %2d: predicted %5.2f s, took %5.2f s: ahead %d, in flight %d, conc %d, latency %.2f s, overhead %.2f s, rpm %.0f, recent %d",
						len(errs), p.Wait.Seconds(), took.Seconds(), p.Ahead, p.InFlight, p.Concurrency, p.Latency.Seconds(), p.Overhead.Seconds(), p.RequestsPerMin, p.RecentRequests)
				}
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
	t.ReportMetric(float64(floors), "floors")
}
