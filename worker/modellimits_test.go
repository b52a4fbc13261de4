package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/worker"
)

// TestModelLimitsReachEveryWorker: two workers, each with its own
// connection pool and tenancy watcher, run a stream of jobs of model m
// (the simulator sends no rate-limit header, so the configured limits are
// all the lanes know). Eight changes of m's RPM or TPM go through the
// admin API, each timed from its answer until both workers' lanes run on
// the new limit: every one within 2 s. Then m's RPM goes down to 6: over
// the 3 s after both lanes have it, the simulator accepts no more than
// the two lanes' buckets allow (6 each, plus the refill), where it
// accepted hundreds in the 3 s before.
func TestModelLimitsReachEveryWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("two workers under load for about 10 s")
	}
	const model = "m"
	tb := setup(t, upstreamsim.Config{Seed: 41, RateLimitHeaders: upstreamsim.HeadersNone,
		Models: map[string]upstreamsim.ModelConfig{model: {Limits: upstreamsim.Limits{RPM: 1e6, TPM: 1e9}}}})
	ctx := context.Background()
	_, err := tb.store.Tenancy().ImportModels(ctx, map[string]llmq.Model{model: {RPM: 60_000, TPM: 1e8, Concurrency: 64}})
	require.NoError(t, err)

	var workers []*tenancyReplica
	for i := range 2 {
		r := newTenancyReplica(t, tb, fmt.Sprintf("worker %d", i))
		w := tb.start(t, func(c *worker.Config) {
			c.Store, c.LiveTenants = r.store.Queue(), r.watch.Tenants
			c.Strategy = shaping.StrategyShape
			c.Catalog = r.watch.Catalog(llmq.Catalog{})
			c.Subscriber = tb.subscriber(t, 16)
		})
		r.worker.Store(w)
		workers = append(workers, r)
	}
	admin := newTenancyReplica(t, tb, "api")
	p, err := producer.New(producer.Config{Publisher: tb.pub, Store: admin.store.Outbox(), Destination: tb.queue, DepthProbe: tb.probe,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	a, err := api.New(api.Config{Producer: p, Store: admin.store.Jobs(), OperatorKeys: []api.OperatorKey{{Name: "ops", Key: tenancyOperatorKey}},
		Tenancy: admin.watch, TenancyStore: admin.store.Tenancy(), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	admin.srv = httptest.NewServer(a)
	t.Cleanup(admin.srv.Close)

	// The load: a job every 2 ms, straight to the queue.
	stop := make(chan struct{})
	var load sync.WaitGroup
	var posted atomic.Int64
	load.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			msg := transport.Message{Value: jobJSON(fmt.Sprintf("j%06d", i), model, "")}
			if tb.pub.Publish(ctx, tb.queue, msg) == nil {
				posted.Add(1)
			}
		}
	})
	t.Cleanup(func() {
		close(stop)
		load.Wait()
	})
	lanesUp := func() bool {
		for _, r := range workers {
			if _, ok := r.worker.Load().LaneLimit(model, "rpm"); !ok {
				return false
			}
		}
		return true
	}
	require.Eventually(t, lanesUp, 30*time.Second, 10*time.Millisecond, "both workers run jobs of m")

	put := func(m llmq.Model) time.Time {
		status, body, h := adminCall(t, admin.srv.URL, http.MethodGet, "/v1/admin/models/"+model, nil, nil)
		require.Equal(t, http.StatusOK, status, string(body))
		status, body, _ = adminCall(t, admin.srv.URL, http.MethodPut, "/v1/admin/models/"+model, m, http.Header{"If-Match": {h.Get("ETag")}})
		require.Equal(t, http.StatusOK, status, string(body))
		return time.Now()
	}
	reached := func(start time.Time, bucket string, want float64) time.Duration {
		var took time.Duration
		for _, r := range workers {
			for {
				got, _ := r.worker.Load().LaneLimit(model, bucket)
				if math.Abs(got-want) < 1e-6*want {
					break
				}
				require.Less(t, time.Since(start), 10*time.Second, "%s: %s %v not reached (has %v)", r.name, bucket, want, got)
				time.Sleep(time.Millisecond) // a poll interval, not a wait for correctness
			}
			took = max(took, time.Since(start))
		}
		return took
	}
	var took []time.Duration
	for i := range 4 {
		rpm, tpm := float64(30_000+1_000*i), float64(5e7+1e6*i)
		took = append(took, reached(put(llmq.Model{RPM: rpm, TPM: 1e8, Concurrency: 64}), "rpm", rpm))
		took = append(took, reached(put(llmq.Model{RPM: rpm, TPM: tpm, Concurrency: 64}), "tpm", tpm))
	}
	sorted := slices.Sorted(slices.Values(took))
	t.Logf("%d changes of m's limits, %d jobs posted meanwhile: took median %v, max %v", len(took), posted.Load(),
		sorted[len(sorted)/2], sorted[len(sorted)-1])
	for i, d := range took {
		require.LessOrEqual(t, d, 2*time.Second, "change %d took %v to reach both workers", i, d)
	}

	accepted := func() int64 { return tb.sim.Sim.Stats().Models[model].Accepted }
	before := accepted()
	time.Sleep(3 * time.Second) // a window of the served rate
	servedBefore := accepted() - before
	start := put(llmq.Model{RPM: 6, TPM: 1e8, Concurrency: 64})
	t.Logf("RPM 6 reached both workers in %v", reached(start, "rpm", 6))
	time.Sleep(500 * time.Millisecond) // the calls admitted before the change end
	before = accepted()
	time.Sleep(3 * time.Second) // a window of the served rate
	servedAfter := accepted() - before
	t.Logf("calls accepted by the simulator in 3 s: %d at RPM 33,000, %d at RPM 6", servedBefore, servedAfter)
	require.Greater(t, servedBefore, int64(100))
	require.LessOrEqual(t, servedAfter, int64(2*(6+1)), "two lanes of RPM 6: a full bucket each and 0.3 of refill")
}

// adminCall sends an operator's request to the admin API at url.
func adminCall(t *testing.T, url, method, path string, body any, header http.Header) (int, []byte, http.Header) {
	t.Helper()
	var rd bytes.Buffer
	if body != nil {
		require.NoError(t, json.NewEncoder(&rd).Encode(body))
	}
	req, err := http.NewRequest(method, url+path, &rd)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tenancyOperatorKey)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close() //nolint:errcheck
	var out bytes.Buffer
	_, err = out.ReadFrom(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out.Bytes(), resp.Header
}
