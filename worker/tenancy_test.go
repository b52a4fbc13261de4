package worker_test

import (
	"bytes"
	"context"
	"crypto/sha256"
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
	"github.com/llmq/llmq/internal/tenancy"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/worker"
)

// tenancyReplica is one process of TestTenancyChangesReachEveryReplica:
// its own store (pool), its own tenancy watcher, and a worker or an API.
type tenancyReplica struct {
	name   string
	store  *store.Store
	watch  *tenancy.Watcher
	worker atomic.Pointer[worker.Worker]
	srv    *httptest.Server
}

// newTenancyReplica opens a store on the bundle's database and runs a
// watcher of its tenancy until the test ends; its loads reach the
// replica's worker, once it has one.
func newTenancyReplica(t *testing.T, tb *testBundle, name string) *tenancyReplica {
	t.Helper()
	ctx := context.Background()
	r := &tenancyReplica{name: name}
	st, err := store.Open(ctx, tb.dbURL, store.WithOrder(store.Order{Live: func() llmq.Tenants { return r.watch.Tenants() }}))
	require.NoError(t, err)
	t.Cleanup(st.Close)
	r.store = st
	r.watch = tenancy.New(st.Tenancy(), tenancy.Config{Logger: slog.New(slog.DiscardHandler), OnLoad: func(s *tenancy.Snapshot) {
		if w := r.worker.Load(); w != nil {
			w.TenantsChanged()
			if s.Models != nil {
				w.ModelsChanged(s.Models)
			}
		}
	}})
	require.NoError(t, r.watch.Load(ctx))
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.watch.Run(runCtx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return r
}

const tenancyOperatorKey = "operator-key"

// TestTenancyChangesReachEveryReplica: two workers and two API replicas,
// each with its own connection pool and watcher, on one database, under a
// load of jobs posted through both APIs and run by both workers. 24
// changes go through the admin API (of either replica, in turn): a new
// TPM for tenant a, then a new key, then its revocation. Each is timed
// from the admin API's answer until every replica applies it: both
// workers' scope of a has the new TPM, both APIs' GET /v1/usage shows
// it, both accept the new key, both refuse the revoked one. Every one of
// them takes at most 2 s.
func TestTenancyChangesReachEveryReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("two workers and two APIs under load for about 10 s")
	}
	const model = "m"
	tb := setup(t, upstreamsim.Config{Seed: 37, Models: map[string]upstreamsim.ModelConfig{model: {Limits: upstreamsim.Limits{RPM: 1e6, TPM: 1e9}}}})
	ctx := context.Background()
	loadKey := "load-key"
	lh := sha256.Sum256([]byte(loadKey))
	_, err := tb.store.Tenancy().Import(ctx, llmq.Tenants{"a": {Scope: llmq.Scope{TPM: 1_000_000}}},
		[]store.ImportKey{{Name: "load", Tenant: "a", Hash: lh[:]}})
	require.NoError(t, err)

	var workers, apis []*tenancyReplica
	for i := range 2 {
		r := newTenancyReplica(t, tb, fmt.Sprintf("worker %d", i))
		w := tb.start(t, func(c *worker.Config) {
			c.Store, c.LiveTenants = r.store.Queue(), r.watch.Tenants
			c.Strategy = shaping.StrategyShape
			c.Catalog = llmq.Catalog{Models: map[string]llmq.Model{model: {RPM: 1e6, TPM: 1e9, Concurrency: 64}}}
			c.Subscriber = tb.subscriber(t, 16)
		})
		r.worker.Store(w)
		workers = append(workers, r)
	}
	for i := range 2 {
		r := newTenancyReplica(t, tb, fmt.Sprintf("api %d", i))
		p, err := producer.New(producer.Config{Publisher: tb.pub, Store: r.store.Outbox(), Destination: tb.queue, DepthProbe: tb.probe,
			LiveTenants: r.watch.Tenants, Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		// The test polls revoked keys from one address: no limit on
		// failed authentications.
		a, err := api.New(api.Config{Producer: p, Store: r.store.Jobs(), OperatorKeys: []api.OperatorKey{{Name: "ops", Key: tenancyOperatorKey}}, Usage: r.store.Budgets(),
			Tenancy: r.watch, TenancyStore: r.store.Tenancy(), Logger: slog.New(slog.DiscardHandler),
			RateLimits: api.RateLimitConfig{AuthFailuresPerMinute: -1}})
		require.NoError(t, err)
		r.srv = httptest.NewServer(a)
		t.Cleanup(r.srv.Close)
		apis = append(apis, r)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	call := func(r *tenancyReplica, method, path, key string, body any, header http.Header) (int, []byte, http.Header) {
		var rd bytes.Buffer
		if body != nil {
			require.NoError(t, json.NewEncoder(&rd).Encode(body))
		}
		req, err := http.NewRequest(method, r.srv.URL+path, &rd)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close() //nolint:errcheck
		var out bytes.Buffer
		_, err = out.ReadFrom(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, out.Bytes(), resp.Header
	}

	// The load: jobs of tenant a posted through both APIs (two posters, a
	// job every 2 ms each), run by both workers, all through the changes.
	stop := make(chan struct{})
	var posted atomic.Int64
	var load sync.WaitGroup
	for g := range 2 {
		load.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(2 * time.Millisecond):
				}
				body := fmt.Sprintf(`{"id":"j%d-%06d","body":{"model":%q,"max_tokens":8,"messages":[{"role":"user","content":"hi %d"}]}}`, g, i, model, i)
				req, err := http.NewRequest(http.MethodPost, apis[i%2].srv.URL+"/v1/jobs", bytes.NewBufferString(body))
				if err != nil {
					continue
				}
				req.Header.Set("Authorization", "Bearer "+loadKey)
				req.Header.Set("Content-Type", "application/json")
				if resp, err := client.Do(req); err == nil {
					_ = resp.Body.Close()
					if resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusCreated {
						posted.Add(1)
					}
				}
			}
		})
	}
	t.Cleanup(func() {
		close(stop)
		load.Wait()
	})
	// Both workers meet tenant a's jobs (their scope is made).
	require.Eventually(t, func() bool {
		for _, r := range workers {
			if _, ok := r.worker.Load().ScopeTPM("tenant:a"); !ok {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond, "both workers run jobs of tenant a")

	// reached polls every replica until check holds for it, and returns
	// the time since start at which the last one did.
	reached := func(start time.Time, replicas []*tenancyReplica, check func(r *tenancyReplica) bool) time.Duration {
		var wg sync.WaitGroup
		took := make([]time.Duration, len(replicas))
		for i, r := range replicas {
			wg.Go(func() {
				for !check(r) {
					if time.Since(start) > 10*time.Second {
						t.Errorf("%s: not reached in 10 s", r.name)
						took[i] = time.Hour
						return
					}
					time.Sleep(time.Millisecond) // a poll interval, not a wait for correctness
				}
				took[i] = time.Since(start)
			})
		}
		wg.Wait()
		return slices.Max(took)
	}
	usageTPM := func(r *tenancyReplica) float64 {
		status, body, _ := call(r, http.MethodGet, "/v1/usage?tenant=a", tenancyOperatorKey, nil, nil)
		require.Equal(t, http.StatusOK, status, string(body))
		var list api.List[api.ScopeUsage]
		require.NoError(t, json.Unmarshal(body, &list))
		for _, s := range list.Data {
			if s.Tenant == "a" && s.Project == "" {
				return s.Limits.TPM
			}
		}
		return 0
	}
	me := func(r *tenancyReplica, key string) int {
		status, _, _ := call(r, http.MethodGet, "/v1/me", key, nil, nil)
		return status
	}
	all := append(slices.Clone(workers), apis...)

	var took []time.Duration
	for i := range 8 {
		admin := apis[i%2]
		// A new TPM for tenant a, read then written with its ETag.
		status, body, h := call(admin, http.MethodGet, "/v1/admin/tenants/a", tenancyOperatorKey, nil, nil)
		require.Equal(t, http.StatusOK, status, string(body))
		tpm := float64(500_000 + 10_000*i)
		status, body, _ = call(admin, http.MethodPut, "/v1/admin/tenants/a", tenancyOperatorKey,
			map[string]any{"tpm": tpm}, http.Header{"If-Match": {h.Get("ETag")}})
		require.Equal(t, http.StatusOK, status, string(body))
		start := time.Now()
		took = append(took, reached(start, all, func(r *tenancyReplica) bool {
			if w := r.worker.Load(); w != nil {
				got, _ := w.ScopeTPM("tenant:a") // rate x period: within rounding
				return math.Abs(got-tpm) < 1e-6*tpm
			}
			return usageTPM(r) == tpm
		}))

		// A new key of tenant a: accepted by both APIs.
		status, body, _ = call(admin, http.MethodPost, "/v1/admin/keys", tenancyOperatorKey,
			map[string]any{"name": fmt.Sprintf("k%d", i), "tenant": "a"}, nil)
		require.Equal(t, http.StatusCreated, status, string(body))
		var created api.AdminKey
		require.NoError(t, json.Unmarshal(body, &created))
		start = time.Now()
		took = append(took, reached(start, apis, func(r *tenancyReplica) bool { return me(r, created.Key) == http.StatusOK }))

		// Its revocation, through the other replica: refused by both.
		status, body, _ = call(apis[(i+1)%2], http.MethodPost, "/v1/admin/keys/"+created.Name+"/revoke", tenancyOperatorKey, nil, nil)
		require.Equal(t, http.StatusOK, status, string(body))
		start = time.Now()
		took = append(took, reached(start, apis, func(r *tenancyReplica) bool { return me(r, created.Key) == http.StatusUnauthorized }))
	}
	sorted := slices.Sorted(slices.Values(took))
	t.Logf("%d changes under a load of %d jobs posted: took median %v, max %v", len(took), posted.Load(),
		sorted[len(sorted)/2], sorted[len(sorted)-1])
	require.GreaterOrEqual(t, len(took), 20)
	for i, d := range took {
		require.LessOrEqual(t, d, 2*time.Second, "change %d took %v to reach every replica", i, d)
	}
	require.Positive(t, posted.Load(), "the changes were made under load")
}

// TestPausedTenantWaits: a worker whose live tenants pause tenant a and
// project b/bulk claims none of their jobs, which read waiting_reason
// paused, while b's other jobs run; resumed, the held jobs run.
func TestPausedTenantWaits(t *testing.T) {
	if testing.Short() {
		t.Skip("a worker on Postgres, RabbitMQ and the simulator")
	}
	var live atomic.Pointer[llmq.Tenants]
	set := func(ts llmq.Tenants) { live.Store(&ts) }
	set(llmq.Tenants{"a": {Scope: llmq.Scope{Paused: true}}, "b": {Projects: map[string]llmq.Scope{"bulk": {Paused: true}}}})
	tb := setup(t, upstreamsim.Config{Seed: 5})
	now := func() llmq.Tenants { return *live.Load() }
	st, err := store.Open(context.Background(), tb.dbURL, store.WithOrder(store.Order{Live: now}))
	require.NoError(t, err)
	t.Cleanup(st.Close)
	tb.store, tb.letters.store = st, st
	w := tb.start(t, func(c *worker.Config) { c.LiveTenants = now })
	job := func(tenant, project string, i int) []byte {
		return []byte(fmt.Sprintf(`{"id":"%s%s-%d","tenant":%q,"project":%q,"body":{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}}`,
			tenant, project, i, tenant, project))
	}
	for i := range 5 {
		tb.publish(t, job("a", "", i), job("b", "bulk", i), job("b", "", i))
	}
	require.Eventually(t, func() bool { return tb.count(t, `tenant = 'b' AND project = '' AND status = 'succeeded'`) == 5 },
		30*time.Second, 10*time.Millisecond, "b's other jobs run")
	require.Eventually(t, func() bool { return tb.count(t, `status = 'queued'`) == 10 }, 10*time.Second, 10*time.Millisecond,
		"a's jobs and b/bulk's are recorded, and wait")
	require.Zero(t, tb.count(t, `status <> 'queued' AND (tenant = 'a' OR project = 'bulk')`))
	for _, k := range []store.Key{{Tenant: "a", ID: "a-0"}, {Tenant: "b", ID: "bbulk-0"}} {
		rec, err := st.Jobs().Get(context.Background(), k.Tenant, k.ID)
		require.NoError(t, err)
		require.Equal(t, store.WaitingReasonPaused, rec.WaitingReason, k.String())
	}
	set(llmq.Tenants{})
	w.TenantsChanged()
	require.Eventually(t, func() bool { return tb.count(t, `status = 'succeeded'`) == 15 }, 30*time.Second, 10*time.Millisecond,
		"resumed, they run")
}
