package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/app"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/internal/workload"
	"github.com/llmq/llmq/shaping"
)

// The million scenario is a backlog of a million jobs queued in Postgres,
// the queue of record, past the ingest window (as the API's outbox records
// them: the broker only carries arrivals, and a worker holds at most its
// prefetch of those), with `llmq api` in front and a worker claiming from
// them at its quota. At each level it reads the API over HTTP, one caller
// and then millionClients callers at a time, and reports each endpoint's
// latency.
const (
	// millionJobs is the largest backlog at scale 1; the levels are a
	// hundredth, a tenth and all of it.
	millionJobs = 1_000_000
	// millionFinished is the share of finished jobs beside the queued
	// ones (succeeded today): 200,000 at 1,000,000 queued.
	millionFinished = 0.2
	// millionTenants share the jobs evenly.
	millionTenants = 10
	// millionClients is the callers reading at once in the second round
	// (the first has one).
	millionClients = 8
	// millionRequests is the requests per endpoint and level at scale 1
	// (at least 20).
	millionRequests = 1000
	// millionKey is tenant t3's API key; millionOpsKey an operator's.
	millionKey    = "sk-llmq-bench-million"
	millionOpsKey = "sk-llmq-bench-million-ops"
	// millionRPM is the worker's quota: it claims a few jobs a second,
	// the backlog stays.
	millionRPM = 600
)

// MillionRow is one endpoint's latency at one backlog.
type MillionRow struct {
	// Queued and Finished count the jobs in Postgres.
	Queued, Finished int
	// Endpoint is the request, with the key that made it.
	Endpoint string
	// Clients is the callers reading at once.
	Clients int
	// P50 and P99 are over Requests requests.
	P50, P99 time.Duration
	Requests int
}

// millionEndpoint is a request the scenario makes: path gives the i-th
// request's path.
type millionEndpoint struct {
	name string
	key  string
	path func(i int) string
}

// million runs the scenario and writes its section.
func (b *Bench) million(ctx context.Context, md *strings.Builder, rep *Report) error {
	top := max(1000, int(math.Round(millionJobs*b.cfg.Scale)))
	levels := []int{top / 100, top / 10, top}
	fmt.Fprintf(b.cfg.Progress, "bench: %-18s up to %d queued jobs ...", ScenarioMillion, top)
	began := time.Now()
	requests := max(20, int(math.Round(millionRequests*min(1, b.cfg.Scale))))
	rows, err := b.runMillion(ctx, levels, requests)
	if err != nil {
		fmt.Fprintln(b.cfg.Progress, " failed")
		return err
	}
	fmt.Fprintf(b.cfg.Progress, " done in %s\n", time.Since(began).Round(time.Second))
	rep.Million = rows
	fmt.Fprintf(md, `## A backlog of %s queued jobs: the API's reads

Jobs queued in Postgres, the queue of record, as the API's outbox records them past the ingest
window (the broker carries arrivals only; a worker holds at most its prefetch of them), %d tenants,
beside %.0f%% as many jobs succeeded today; recorded with one INSERT … SELECT generate_series per
level, then VACUUM ANALYZE (autovacuum's work on a live table). `+"`llmq api`"+` (internal/app, as the
command assembles it) serves them and a worker claims from them at %d RPM, both in this process
with an instant simulator, Postgres beside it. Callers read over HTTP, %d requests per endpoint
and level, one endpoint at a time, first one caller, then %d at once (on 2 cores shared with the
API, the worker and Postgres, their latency is mostly their wait for each other). *tenant*: the key
of one tenant (a tenth of the jobs); *operator*: every tenant's. `+"`GET /v1/queue`"+` is the
backpressure probe (cached 1 s by the producer, as in production: the p99 holds the refreshes).
Regenerate: `+"`llmq bench --only million --out docs/bench/million`"+` (or `+"`make bench-million`"+`).

### One caller

%s
### %d callers at once

%s
`, grouped(top), millionTenants, 100*millionFinished, millionRPM, requests, millionClients,
		millionMarkdown(levels, rows, 1), millionClients, millionMarkdown(levels, rows, millionClients))
	return nil
}

// millionMarkdown is one row per endpoint, p50 / p99 at each level, of
// the rows read by clients callers.
func millionMarkdown(levels []int, rows []MillionRow, clients int) string {
	var sb strings.Builder
	sb.WriteString("| endpoint |")
	for _, l := range levels {
		fmt.Fprintf(&sb, " %s queued: p50 / p99 |", grouped(l))
	}
	sb.WriteString("\n|---|")
	for range levels {
		sb.WriteString("---:|")
	}
	var order []string
	cells := map[string][]string{}
	for _, r := range rows {
		if r.Clients != clients {
			continue
		}
		if _, ok := cells[r.Endpoint]; !ok {
			order = append(order, r.Endpoint)
		}
		cells[r.Endpoint] = append(cells[r.Endpoint], fmt.Sprintf("%.1f / %.1f ms", ms(r.P50), ms(r.P99)))
	}
	for _, e := range order {
		fmt.Fprintf(&sb, "\n| %s | %s |", e, strings.Join(cells[e], " | "))
	}
	sb.WriteString("\n")
	return sb.String()
}

// runMillion records the levels' jobs in a database of its own and reads
// the API at each.
func (b *Bench) runMillion(ctx context.Context, levels []int, requests int) ([]MillionRow, error) {
	dbURL, drop, err := b.database(ctx)
	if err != nil {
		return nil, err
	}
	defer drop()
	_, root, stop, err := b.instantSim(ctx, "million")
	if err != nil {
		return nil, err
	}
	defer stop()
	broker, err := config.ParseBroker("memory://million-" + uuid.NewString()[:8] + "/" + queueName)
	if err != nil {
		return nil, fmt.Errorf("bench: million: %w", err)
	}
	settings := func() *config.Config {
		return &config.Config{DatabaseURL: dbURL, Broker: broker, OpenAIBaseURL: root + "/v1", OpenAIAPIKey: simAPIKey,
			Models:  map[string]llmq.Model{Primary: {RPM: millionRPM}},
			APIKeys: map[string]string{millionKey: "t3"}, OperatorKeys: []config.OperatorKey{{Name: "bench", Key: millionOpsKey}},
			// The reads measure the API's latency under load: no limit at its door.
			RateLimits: config.RateLimits{KeyRPM: -1, TenantRPM: -1}}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	api, err := app.New(ctx, app.Config{Settings: settings(), Migrate: true, Logger: b.log, API: &app.APIConfig{Listener: ln}})
	if err != nil {
		return nil, fmt.Errorf("bench: million: api: %w", err)
	}
	defer func() { _ = api.Stop(ctx) }()
	if err := api.Start(ctx); err != nil {
		return nil, err
	}
	w, err := app.New(ctx, app.Config{Settings: settings(), Logger: b.log,
		Worker: &app.WorkerConfig{Strategy: shaping.StrategyRPM, ShutdownTimeout: shutdownTimeout,
			UpstreamTimeout: 30 * time.Second, NoBatchLane: true}})
	if err != nil {
		return nil, fmt.Errorf("bench: million: worker: %w", err)
	}
	defer func() { _ = w.Stop(ctx) }()
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("bench: million: %w", err)
	}
	defer pool.Close()

	base := "http://" + api.APIAddr().String()
	var rows []MillionRow
	queued, finished := 0, 0
	for _, level := range levels {
		done := int(float64(level) * millionFinished)
		if err := recordBacklog(ctx, pool, queued+1, level, finished+1, done); err != nil {
			return nil, err
		}
		queued, finished = level, done
		for _, e := range millionEndpoints(level) {
			for _, clients := range []int{1, millionClients} {
				lat, err := readConcurrently(ctx, base, e, clients, requests)
				if err != nil {
					return nil, err
				}
				rows = append(rows, MillionRow{Queued: queued, Finished: finished, Endpoint: e.name, Clients: clients,
					Requests: len(lat), P50: workload.Percentile(lat, 0.5), P99: workload.Percentile(lat, 0.99)})
			}
		}
	}
	return rows, nil
}

// millionEndpoints are the reads measured at a backlog of level jobs.
func millionEndpoints(level int) []millionEndpoint {
	// t3's jobs are those whose number is 3 modulo the tenants.
	ids := level / millionTenants
	rng := rand.New(rand.NewPCG(17, uint64(level)))
	return []millionEndpoint{
		{"`GET /v1/jobs/{id}` (tenant, a queued job)", millionKey, func(int) string {
			return fmt.Sprintf("/v1/jobs/backlog-%d", rng.IntN(ids)*millionTenants+3)
		}},
		{"`GET /v1/jobs?status=queued` (tenant)", millionKey, constPath("/v1/jobs?status=queued")},
		{"`GET /v1/jobs?status=succeeded` (tenant)", millionKey, constPath("/v1/jobs?status=succeeded")},
		{"`GET /v1/jobs?status=queued` (operator)", millionOpsKey, constPath("/v1/jobs?status=queued")},
		{"`GET /v1/jobs?status=running` (operator)", millionOpsKey, constPath("/v1/jobs?status=running")},
		{"`GET /v1/usage` (tenant)", millionKey, constPath("/v1/usage")},
		{"`GET /v1/usage` (operator)", millionOpsKey, constPath("/v1/usage")},
		{"`GET /v1/queue` (backpressure probe)", millionKey, constPath("/v1/queue")},
		{"`GET /v1/stats/jobs` (tenant)", millionKey, constPath("/v1/stats/jobs")},
		{"`GET /v1/stats/jobs` (operator)", millionOpsKey, constPath("/v1/stats/jobs")},
	}
}

func constPath(p string) func(int) string { return func(int) string { return p } }

// grouped writes n with its thousands grouped: 1,000,000.
func grouped(n int) string { return english.Sprint(n) }

// english formats numbers as the report writes them.
var english = message.NewPrinter(language.English)

// recordBacklog records the queued jobs backlog-qFrom to backlog-qTo and
// the succeeded jobs done-dFrom to done-dTo (finished within the last
// ten minutes, today) with their usage, then vacuums and analyzes the
// table.
func recordBacklog(ctx context.Context, pool *pgxpool.Pool, qFrom, qTo, dFrom, dTo int) error {
	if _, err := pool.Exec(ctx, `INSERT INTO jobs (tenant, id, status, priority, requested_model, body,
			created_at, updated_at, sched_key, est_prompt_tokens, est_output_tokens)
		SELECT 't' || (g % $3), 'backlog-' || g, 'queued', 'normal', $4,
			jsonb_build_object('model', $4::text, 'max_tokens', 32, 'messages',
				jsonb_build_array(jsonb_build_object('role', 'user', 'content', repeat('Summarise this sentence. ', 8) || g))),
			now(), now(), now(), 60, 32
		FROM generate_series($1::int, $2::int) g`, qFrom, qTo, millionTenants, Primary); err != nil {
		return fmt.Errorf("bench: million: record queued jobs: %w", err)
	}
	// The succeeded jobs' usage goes into job_usage as the statements
	// finishing them would have added it (migration 0020).
	if _, err := pool.Exec(ctx, `WITH done AS (INSERT INTO jobs (tenant, id, status, priority, requested_model, used_model, body, result,
			created_at, updated_at, started_at, finished_at, sched_key, est_prompt_tokens, est_output_tokens,
			attempts, prompt_tokens, completion_tokens, published_at)
		SELECT 't' || (g % $3), 'done-' || g, 'succeeded', 'normal', $4, $4,
			jsonb_build_object('model', $4::text, 'max_tokens', 32, 'messages',
				jsonb_build_array(jsonb_build_object('role', 'user', 'content', repeat('Summarise this sentence. ', 8) || g))),
			'{"choices":[{"index":0,"message":{"role":"assistant","content":"Five words, as you asked."}}]}',
			f - interval '1 s', f, f - interval '1 s', f, f - interval '1 s', 60, 32, 1, 60, 8, f
		FROM generate_series($1::int, $2::int) g,
			LATERAL (SELECT greatest(date_trunc('day', now()), now() - (g % 600) * interval '1 s') AS f) t
		RETURNING tenant, project, finished_at, calls, prompt_tokens + completion_tokens AS tokens)
		INSERT INTO job_usage (span, at, tenant, project, jobs, calls, tokens)
		SELECT 'fresh', date_trunc('second', finished_at), tenant, project, count(*), sum(calls), sum(tokens)
		FROM done GROUP BY 2, 3, 4`,
		dFrom, dTo, millionTenants, Primary); err != nil {
		return fmt.Errorf("bench: million: record succeeded jobs: %w", err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE jobs`); err != nil {
		return fmt.Errorf("bench: million: vacuum: %w", err)
	}
	return nil
}

// readConcurrently makes n requests of e, clients at a time (after one warming request per caller), and returns their
// latencies; any answer but 200 fails the run. e.path is called from this
// goroutine only.
func readConcurrently(ctx context.Context, base string, e millionEndpoint, clients, n int) ([]time.Duration, error) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}, Timeout: time.Minute}
	defer client.CloseIdleConnections()
	var (
		mu      sync.Mutex
		paths   = make(chan string, clients)
		lat     = make([]time.Duration, 0, n)
		failure error
		wg      sync.WaitGroup
	)
	get := func(path string) (time.Duration, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			return 0, err
		}
		req.Header.Set("Authorization", "Bearer "+e.key)
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		took := time.Since(start)
		_ = resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET %s: HTTP %d", path, resp.StatusCode)
		}
		return took, err
	}
	for c := range clients {
		warm := e.path(-1 - c)
		wg.Go(func() {
			_, err := get(warm)
			for path := range paths {
				var took time.Duration
				if err == nil {
					took, err = get(path)
				}
				mu.Lock()
				if err != nil && failure == nil {
					failure = fmt.Errorf("bench: million: %w", err)
				}
				if err == nil {
					lat = append(lat, took)
				}
				mu.Unlock()
			}
		})
	}
	for i := range n {
		paths <- e.path(i)
	}
	close(paths)
	wg.Wait()
	return lat, failure
}
