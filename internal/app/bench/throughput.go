package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/app"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/internal/workload"
	"github.com/llmq/llmq/shaping"
)

// The throughput scenario measures llmq's own overhead:
// an instant upstream without quotas, so every second goes to the API,
// the broker, Postgres and the worker. Callers post single-job
// POST /v1/jobs requests, throughputClients at a time; the worker behind
// the API drains them.
const (
	// throughputJobs is the jobs of a run at scale 1.
	throughputJobs = 20_000
	// throughputClients is the callers posting at once.
	throughputClients = 64
	// throughputInFlight is the worker's MaxInFlight.
	throughputInFlight = 512
	// throughputKey is the callers' llmq API key.
	throughputKey = "sk-llmq-bench-throughput"
)

// ThroughputResult is the throughput scenario's run.
type ThroughputResult struct {
	// Broker names the broker's kind.
	Broker string
	// Jobs is the jobs posted, all succeeded.
	Jobs int
	// Enqueue is the time to post every job; EnqueueP50 and EnqueueP99
	// the latencies of the POSTs.
	Enqueue, EnqueueP50, EnqueueP99 time.Duration
	// EndToEnd is from the first POST to the last result stored.
	EndToEnd time.Duration
	// UpstreamCalls is the simulator's count of the calls it answered.
	UpstreamCalls int64
}

// throughput runs the scenario and writes its section.
func (b *Bench) throughput(ctx context.Context, md *strings.Builder, rep *Report) error {
	jobs := max(1000, int(math.Round(throughputJobs*b.cfg.Scale)))
	fmt.Fprintf(b.cfg.Progress, "bench: %-18s %d jobs ...", "throughput", jobs)
	res, err := b.runThroughput(ctx, jobs)
	if err != nil {
		fmt.Fprintln(b.cfg.Progress, " failed")
		return err
	}
	fmt.Fprintf(b.cfg.Progress, " done in %s\n", res.EndToEnd.Round(time.Second))
	rep.Throughput = res
	fmt.Fprintf(md, `## Throughput: llmq's own overhead

%d callers post %d jobs (about 200 bytes of prompt each), one job per `+"`POST /v1/jobs`"+`, to `+"`llmq api`"+`
with one worker behind it (MaxInFlight %d) calling an instant simulator without quotas: API, worker,
simulator and broker (%s) in one process, Postgres beside it. *Enqueue*: the POSTs (each records
its job in the outbox and publishes it, confirmed). *End to end*: from the first POST to the last
result stored.

%s
`, throughputClients, jobs, throughputInFlight, res.Broker, res.markdown())
	return nil
}

func (r *ThroughputResult) markdown() string {
	rate := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(r.Jobs)/d.Seconds()) }
	return fmt.Sprintf(`| broker | jobs | enqueue jobs/s | POST p50 | POST p99 | end-to-end jobs/s | upstream calls |
|---|---:|---:|---:|---:|---:|---:|
| %s | %d | %s | %.1f ms | %.1f ms | %s | %d |
`, r.Broker, r.Jobs, rate(r.Enqueue), ms(r.EnqueueP50), ms(r.EnqueueP99), rate(r.EndToEnd), r.UpstreamCalls)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// runThroughput runs jobs through an API and a worker in one process, in a
// database of their own.
func (b *Bench) runThroughput(ctx context.Context, jobs int) (*ThroughputResult, error) {
	dbURL, drop, err := b.database(ctx)
	if err != nil {
		return nil, err
	}
	defer drop()
	sim, root, stop, err := b.instantSim(ctx, "throughput")
	if err != nil {
		return nil, err
	}
	defer stop()
	brokerURL := b.cfg.Broker
	if brokerURL == "" {
		brokerURL = "memory://throughput-" + uuid.NewString()[:8] + "/" + queueName
	}
	broker, err := config.ParseBroker(brokerURL)
	if err != nil {
		return nil, fmt.Errorf("bench: throughput: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	a, err := app.New(ctx, app.Config{
		Settings: &config.Config{DatabaseURL: dbURL, Broker: broker, OpenAIBaseURL: root + "/v1", OpenAIAPIKey: simAPIKey,
			Models: map[string]llmq.Model{Primary: {}}, APIKeys: map[string]string{throughputKey: tenant},
			// The scenario measures the API's own capacity: no limit at its door.
			RateLimits: config.RateLimits{KeyRPM: -1, TenantRPM: -1}},
		Migrate: true, Logger: b.log,
		Worker: &app.WorkerConfig{Strategy: shaping.StrategyRetry, MaxInFlight: throughputInFlight,
			ShutdownTimeout: shutdownTimeout, UpstreamTimeout: 30 * time.Second, NoBatchLane: true},
		API: &app.APIConfig{Listener: ln},
	})
	if err != nil {
		return nil, fmt.Errorf("bench: throughput: %w", err)
	}
	defer func() { _ = a.Stop(ctx) }()
	if err := a.Start(ctx); err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("bench: throughput: %w", err)
	}
	defer pool.Close()

	res := &ThroughputResult{Broker: string(broker.Kind), Jobs: jobs}
	began := time.Now()
	lat, err := postJobs(ctx, "http://"+a.APIAddr().String()+"/v1/jobs", jobs)
	if err != nil {
		return nil, err
	}
	res.Enqueue = time.Since(began)
	res.EnqueueP50, res.EnqueueP99 = workload.Percentile(lat, 0.5), workload.Percentile(lat, 0.99)
	if err := awaitSucceeded(ctx, pool, jobs, 50*time.Millisecond); err != nil {
		return nil, fmt.Errorf("bench: throughput: %w", err)
	}
	res.EndToEnd = time.Since(began)
	res.UpstreamCalls = sim.Stats().Models[Primary].Accepted
	return res, nil
}

// instantSim starts a simulator that answers at once and without quotas
// (the scenarios of llmq's own overhead) and returns it, its root URL and
// its stop.
func (b *Bench) instantSim(ctx context.Context, scenario string) (*upstreamsim.Server, string, func(), error) {
	sim, err := upstreamsim.New(upstreamsim.Config{Seed: 17, APIKeys: []string{simAPIKey},
		Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: -1, TPM: -1}}}, upstreamsim.WithLogger(b.log))
	if err != nil {
		return nil, "", nil, fmt.Errorf("bench: %s: simulator: %w", scenario, err)
	}
	root, err := sim.Start(ctx, "127.0.0.1:0")
	if err != nil {
		return nil, "", nil, err
	}
	return sim, root, func() { _ = app.StopWithin(ctx, sim.Stop, stopTimeout) }, nil
}

// postJobs posts n single-job requests to url, throughputClients at a
// time, and returns their latencies; any answer but 202 fails the run.
func postJobs(ctx context.Context, url string, n int) ([]time.Duration, error) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: throughputClients}, Timeout: time.Minute}
	defer client.CloseIdleConnections()
	prompt := strings.Repeat("Summarise this sentence in five words. ", 5)
	var (
		next    atomic.Int64
		mu      sync.Mutex
		lat     = make([]time.Duration, 0, n)
		failure error
		wg      sync.WaitGroup
	)
	for range throughputClients {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				body := fmt.Sprintf(`{"id":"tp-%d","body":{"model":%q,"max_tokens":32,"messages":[{"role":"user","content":"%s"}]}}`,
					i, Primary, prompt)
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte(body)))
				if err != nil {
					return
				}
				req.Header.Set("Authorization", "Bearer "+throughputKey)
				req.Header.Set("Content-Type", "application/json")
				start := time.Now()
				resp, err := client.Do(req)
				took := time.Since(start)
				if err == nil {
					// Read to the end, or the client dials a connection
					// per request.
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode != http.StatusAccepted {
						err = fmt.Errorf("POST /v1/jobs: HTTP %d", resp.StatusCode)
					}
				}
				mu.Lock()
				lat = append(lat, took)
				if err != nil && failure == nil {
					failure = fmt.Errorf("bench: throughput: %w", err)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return lat, failure
}

// awaitSucceeded polls, every period, until jobs jobs have succeeded.
func awaitSucceeded(ctx context.Context, pool *pgxpool.Pool, jobs int, every time.Duration) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		var done int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE status = 'succeeded'`).Scan(&done); err != nil {
			return err
		}
		if done == jobs {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
