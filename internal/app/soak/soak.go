package soak

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/chaos"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/migrations"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/kafka"
	"github.com/llmq/llmq/transport/open"
)

// Config is a soak's configuration.
type Config struct {
	// Duration is how long the load and the nemesis run. Default 15m.
	Duration time.Duration
	// Drain bounds the wait, after the load, for every job to end.
	// Default 5m.
	Drain time.Duration
	// Seed drives the nemesis and the load.
	Seed uint64
	// Rate is the load in submissions per second. Default 20.
	Rate float64
	// Bin is the llmq binary the workers and API replicas run (the
	// soak's own, os.Executable, when empty).
	Bin string
	// Dir keeps each process's log (a temporary directory when empty).
	Dir string
	// PostgresURL is the server the soak creates its database on
	// (default postgres://postgres@127.0.0.1:5432/postgres); RabbitMQ the
	// broker (default amqp://guest:guest@127.0.0.1:5672/).
	PostgresURL, RabbitMQ string
	// KeepDatabase keeps the soak's database at the end.
	KeepDatabase bool
	// PostgresControl, when set, makes each Postgres outage a real stop
	// and start of the server: the command (split on spaces) run with
	// "stop" then "start" appended, e.g. "pg_ctlcluster 15 main". Empty:
	// the outage is the proxy cutting every connection. Every client of
	// that server sees the outage, not only the soak's.
	PostgresControl string
	// Bounds are the thresholds (BoundsDefault when zero).
	Bounds Bounds
	// Out receives the progress and the report; Logger the driver's
	// own warnings.
	Out    io.Writer
	Logger *slog.Logger
}

// Defaults.
const (
	PostgresURLDefault = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	rabbitMQDefault    = "amqp://guest:guest@127.0.0.1:5672/"
	DurationDefault    = 15 * time.Minute
	DrainDefault       = 5 * time.Minute
	RateDefault        = 20.0
)

// The soak's model, as the simulator limits it and llmq is configured.
const (
	model    = "gpt-4o-mini"
	modelRPM = 1800
	modelTPM = 2_000_000
)

// tenantsYAML are the soak's tenants: globex has a quota of its own,
// initech a day budget that the load spends (then refused: 402 at the
// API, budget_exceeded dead letters at ingest).
const tenantsYAML = `tenants:
  acme: {weight: 3}
  globex: {rpm: 150}
  initech: {daily_cost: 0.05, overage: reject}
  umbrella: {}
`

// globexRPM is globex's quota in tenantsYAML.
const globexRPM = 150

// Run runs a soak and returns its report; the error is a failure to run
// it, not a threshold missed (Report.Failures).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.Duration = max(cfg.Duration, 0)
	if cfg.Duration == 0 {
		cfg.Duration = DurationDefault
	}
	if cfg.Drain <= 0 {
		cfg.Drain = DrainDefault
	}
	if cfg.Rate <= 0 {
		cfg.Rate = RateDefault
	}
	if cfg.Bounds == (Bounds{}) {
		cfg.Bounds = BoundsDefault
	}
	cfg.PostgresURL = cmp.Or(cfg.PostgresURL, PostgresURLDefault)
	cfg.RabbitMQ = cmp.Or(cfg.RabbitMQ, rabbitMQDefault)
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Bin == "" {
		bin, err := os.Executable()
		if err != nil {
			return nil, err
		}
		cfg.Bin = bin
	}
	if cfg.Dir != "" {
		if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
			return nil, err
		}
	} else {
		dir, err := os.MkdirTemp("", "llmq-soak-")
		if err != nil {
			return nil, err
		}
		cfg.Dir = dir
	}
	s := &soak{cfg: cfg, out: cfg.Out}
	defer s.close()
	if err := s.setUp(ctx); err != nil {
		return nil, err
	}
	return s.run(ctx)
}

// soak is one run.
type soak struct {
	cfg   Config
	out   io.Writer
	begin time.Time
	name  string // database, queue and topic

	dbURL    string
	mqHost   string // RabbitMQ's host:port
	db       *pgxpool.Pool
	pg, mq   *chaos.Proxy
	kafka    []string
	stopKfk  func()
	sim      *upstreamsim.Server
	front    *front
	simSrv   *http.Server
	simURL   string
	workers  []*proc
	apis     []*proc
	apiURLs  []string
	pubs     map[string]transport.Publisher // "rabbitmq", "kafka"
	closers  []func()
	killsMu  sync.Mutex
	kills    []time.Time // when a worker was killed (-9)
	faultsMu sync.Mutex
	faults   map[Kind]int
}

func (s *soak) logf(format string, args ...any) {
	fmt.Fprintf(s.out, "%s %s\n", time.Since(s.begin).Round(time.Second), fmt.Sprintf(format, args...))
}

func (s *soak) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

// setUp starts everything but the load and the nemesis.
func (s *soak) setUp(ctx context.Context) error {
	s.begin = time.Now()
	s.name = fmt.Sprintf("llmq_soak_%d_%d", s.cfg.Seed, os.Getpid())
	u, err := pgx.ParseConfig(s.cfg.PostgresURL)
	if err != nil {
		return fmt.Errorf("soak: --database-url: %w", err)
	}
	pu, err := url.Parse(s.cfg.PostgresURL)
	if err != nil || pu.Host == "" {
		return errors.New("soak: --database-url: want postgres://user[:password]@host:port/database")
	}
	pu.Path = "/" + s.name
	s.dbURL = pu.String()
	mu, err := url.Parse(s.cfg.RabbitMQ)
	if err != nil || mu.Host == "" {
		return errors.New("soak: --rabbitmq-url: want amqp://user:password@host:port/")
	}
	s.mqHost = mu.Host
	if _, err := migrations.EnsureDatabase(ctx, s.dbURL); err != nil {
		return err
	}
	if !s.cfg.KeepDatabase {
		s.closers = append(s.closers, func() { dropDatabase(s.cfg.PostgresURL, s.name) })
	}
	st, err := store.Open(ctx, s.dbURL)
	if err != nil {
		return err
	}
	_, err = st.Migrate(ctx)
	st.Close()
	if err != nil {
		return err
	}
	// The checker reads the tables as an outside observer, with SQL of
	// its own rather than the store's methods it checks.
	if s.db, err = pgxpool.New(ctx, s.dbURL); err != nil {
		return err
	}
	s.closers = append(s.closers, s.db.Close)
	if s.pg, err = chaos.New(fmt.Sprintf("%s:%d", u.Host, u.Port)); err != nil {
		return err
	}
	s.closers = append(s.closers, func() { _ = s.pg.Close() })
	if s.mq, err = chaos.New(s.mqHost); err != nil {
		return err
	}
	s.closers = append(s.closers, func() { _ = s.mq.Close() })
	s.closers = append(s.closers, func() { deleteQueues(s.cfg.RabbitMQ, s.name) })
	if s.kafka, s.stopKfk, err = kafka.StartEmbedded(ctx, s.name, s.name+dlq.DLQSuffix); err != nil {
		return err
	}
	s.closers = append(s.closers, s.stopKfk)
	if err := s.startSim(); err != nil {
		return err
	}
	s.pubs = map[string]transport.Publisher{}
	for kind, url := range map[string]string{"rabbitmq": s.rabbitURL(false), "kafka": s.kafkaURL()} {
		pub, sub, err := open.Open(ctx, url, open.Options{Logger: s.cfg.Logger})
		if err != nil {
			return err
		}
		_ = sub.Close()
		s.pubs[kind] = pub
		s.closers = append(s.closers, func() { _ = pub.Close() })
	}
	return s.startProcs()
}

func (s *soak) rabbitURL(proxied bool) string {
	u := strings.TrimSuffix(s.cfg.RabbitMQ, "/") + "/?queue=" + s.name
	if proxied {
		u = strings.Replace(u, s.mqHost, s.mq.Addr(), 1)
	}
	return u
}

func (s *soak) kafkaURL() string { return "kafka://" + strings.Join(s.kafka, ",") + "/" + s.name }

// startSim starts the simulator behind the front.
func (s *soak) startSim() error {
	sim, err := upstreamsim.New(upstreamsim.Config{
		Seed:    s.cfg.Seed,
		Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: modelRPM, TPM: modelTPM}},
		Latency: upstreamsim.LatencyConfig{TTFT: 300 * time.Millisecond, PerToken: 5 * time.Millisecond},
		Output:  upstreamsim.OutputConfig{Min: 16, Max: 128},
	})
	if err != nil {
		return err
	}
	s.sim = sim
	s.front = newFront(sim.Handler(), 3*time.Second)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.simSrv = &http.Server{Handler: s.front, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.simSrv.Serve(ln) }()
	s.closers = append(s.closers, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.simSrv.Shutdown(ctx)
	})
	s.simURL = "http://" + ln.Addr().String() + "/v1"
	return nil
}

// startProcs starts 3 workers (two on RabbitMQ, one on Kafka) and 2 API
// replicas (one each), every one to Postgres and RabbitMQ through the
// proxies the nemesis cuts.
func (s *soak) startProcs() error {
	conf := filepath.Join(s.cfg.Dir, "llmq.yaml")
	yaml := fmt.Sprintf("upstream:\n  name_calls: true\nmodels:\n  %s:\n    rpm: %d\n    tpm: %d\n    concurrency: 64\n    input_price_per_1m: %v\n    output_price_per_1m: %v\n",
		model, modelRPM, modelTPM, upstreamsim.InputPerMTokDefault, upstreamsim.OutputPerMTokDefault) + tenantsYAML
	if err := os.WriteFile(conf, []byte(yaml), 0o600); err != nil {
		return err
	}
	db := strings.Replace(s.dbURL, s.pgTarget(), s.pg.Addr(), 1)
	var keys []string
	for _, t := range tenantNames {
		keys = append(keys, "key-"+t+":"+t)
	}
	base := []string{"LLMQ_DATABASE_URL=" + db, "LLMQ_CONFIG=" + conf, "OPENAI_BASE_URL=" + s.simURL,
		"OPENAI_API_KEY=sk-soak", "LLMQ_API_KEYS=" + strings.Join(keys, ","), "GOMAXPROCS=2"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LLMQ_") && !strings.HasPrefix(kv, "OPENAI_") {
			base = append(base, kv)
		}
	}
	brokers := []string{s.rabbitURL(true), s.rabbitURL(true), s.kafkaURL()}
	for i, b := range brokers {
		p, err := newProc(s.cfg.Dir, fmt.Sprintf("worker-%d", i), s.cfg.Bin,
			[]string{"worker", "--metrics-listen", "", "--shutdown-timeout", "10s", "--replica", fmt.Sprintf("soak-%d", i)},
			append([]string{"LLMQ_BROKER=" + b}, base...), s.begin)
		if err != nil {
			return err
		}
		s.workers = append(s.workers, p)
	}
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(time.Now().UnixNano())))
	for i, b := range []string{s.rabbitURL(true), s.kafkaURL()} {
		addr, err := freeAddr(rng)
		if err != nil {
			return err
		}
		p, err := newProc(s.cfg.Dir, fmt.Sprintf("api-%d", i), s.cfg.Bin,
			[]string{"api", "--listen", addr, "--metrics-listen", ""},
			append([]string{"LLMQ_BROKER=" + b}, base...), s.begin)
		if err != nil {
			return err
		}
		s.apis = append(s.apis, p)
		s.apiURLs = append(s.apiURLs, "http://"+addr)
	}
	for _, p := range append(append([]*proc(nil), s.workers...), s.apis...) {
		if err := p.start(); err != nil {
			return err
		}
		s.closers = append(s.closers, func() { p.takeDown(syscall.SIGTERM, 15*time.Second); _ = p.log.Close() })
	}
	return s.waitReady()
}

func (s *soak) pgTarget() string {
	u, _ := pgx.ParseConfig(s.dbURL)
	return fmt.Sprintf("%s:%d", u.Host, u.Port)
}

// waitReady waits for each API replica's /readyz.
func (s *soak) waitReady() error {
	deadline := time.Now().Add(time.Minute)
	for _, u := range s.apiURLs {
		for {
			resp, err := http.Get(u + "/readyz")
			if err == nil {
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("soak: %s not ready after a minute (logs in %s)", u, s.cfg.Dir)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

// freeAddr is a free 127.0.0.1 port for an API replica that keeps it
// across restarts: below the ephemeral range, where no outgoing
// connection takes it while the replica is down.
func freeAddr(rng *rand.Rand) (string, error) {
	for range 100 {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 20000+rng.IntN(10000)))
		if err != nil {
			continue
		}
		addr := ln.Addr().String()
		return addr, ln.Close()
	}
	return "", errors.New("soak: no free port in 20000-29999")
}

// run runs the load and the nemesis, drains and checks.
func (s *soak) run(ctx context.Context) (*Report, error) {
	r := &Report{Seed: s.cfg.Seed, Duration: s.cfg.Duration, CPU: cpuModel(), LoadBefore: loadAvg(), Faults: map[Kind]int{},
		Command: fmt.Sprintf("make soak SOAK_DURATION=%s SOAK_SEED=%d", s.cfg.Duration, s.cfg.Seed)}
	plan := Plan(s.cfg.Seed, s.cfg.Duration)
	r.Planned, r.Overlapping = len(plan), Overlaps(plan)
	s.faults = r.Faults
	s.logf("seed %d: %d faults, %d overlapping; logs in %s", s.cfg.Seed, len(plan), r.Overlapping, s.cfg.Dir)

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var bg sync.WaitGroup
	for _, p := range append(append([]*proc(nil), s.workers...), s.apis...) {
		bg.Go(func() { p.keepAlive(runCtx) })
	}
	bg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-t.C:
				for _, p := range append(append([]*proc(nil), s.workers...), s.apis...) {
					p.sample()
				}
			}
		}
	})
	l := newLoad(s, s.cfg.Seed)
	loadCtx, stopLoad := context.WithTimeout(runCtx, s.cfg.Duration)
	defer stopLoad()
	var faults sync.WaitGroup
	start := time.Now()
	for _, f := range plan {
		faults.Go(func() { s.inject(loadCtx, start, f) })
	}
	l.run(loadCtx)
	faults.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.logf("load done: %d accepted; draining (at most %s)", l.acceptedCount(), s.cfg.Drain)
	drainStart := time.Now()
	s.drain(ctx, l)
	r.Drain = time.Since(drainStart)
	stop()
	bg.Wait()
	for _, p := range append(append([]*proc(nil), s.workers...), s.apis...) {
		p.sample()
	}
	r.LoadAfter = loadAvg()
	if err := s.check(ctx, r, l); err != nil {
		return nil, err
	}
	return r, nil
}

// inject runs fault f of the plan, from start+f.At for f.For.
func (s *soak) inject(ctx context.Context, start time.Time, f Fault) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Until(start.Add(f.At))):
	}
	s.faultsMu.Lock()
	s.faults[f.Kind]++
	s.faultsMu.Unlock()
	s.logf("fault: %s", f)
	end := func() {
		select {
		case <-ctx.Done():
		case <-time.After(f.For):
		}
	}
	switch f.Kind {
	case KillWorker, StopWorker, KillAPI, StopAPI:
		procs := s.workers
		if f.Kind == KillAPI || f.Kind == StopAPI {
			procs = s.apis
		}
		p := procs[f.Target%len(procs)]
		if p.isDown() {
			// Another fault holds it down: take the next one.
			p = procs[(f.Target+1)%len(procs)]
		}
		sig := syscall.SIGTERM
		if f.Kind == KillWorker || f.Kind == KillAPI {
			sig = syscall.SIGKILL
			if f.Kind == KillWorker {
				s.killsMu.Lock()
				s.kills = append(s.kills, time.Now())
				s.killsMu.Unlock()
			}
		}
		if !p.takeDown(sig, 30*time.Second) {
			s.logf("fault %s: %s is down already", f.Kind, p.name)
			return
		}
		end()
		if err := p.start(); err != nil {
			s.logf("restart %s: %v", p.name, err)
		}
	case PostgresCut:
		s.postgresOutage(ctx, end)
	case BrokerCut:
		s.mq.Cut()
		end()
		s.mq.Restore()
	case ProviderOutage:
		s.front.outage.Add(1)
		end()
		s.front.outage.Add(-1)
	case Storm5xx:
		s.front.storm5xx.Add(1)
		end()
		s.front.storm5xx.Add(-1)
	case Storm429:
		s.front.storm429.Add(1)
		end()
		s.front.storm429.Add(-1)
	case LatencySpike:
		s.front.slow.Add(1)
		end()
		s.front.slow.Add(-1)
	case QuotaHalved:
		s.sim.SetLimits(model, upstreamsim.Limits{RPM: modelRPM / 2, TPM: modelTPM / 2})
		end()
		s.sim.SetLimits(model, upstreamsim.Limits{RPM: modelRPM, TPM: modelTPM})
	}
	s.logf("fault over: %s", f.Kind)
}

// postgresOutage takes Postgres away until end returns: the server
// stopped and started again with cfg.PostgresControl, else the proxy's cut.
func (s *soak) postgresOutage(ctx context.Context, end func()) {
	if s.cfg.PostgresControl == "" {
		s.pg.Cut()
		end()
		s.pg.Restore()
		return
	}
	s.postgres(ctx, "stop")
	end()
	s.postgres(ctx, "start")
}

// postgres runs cfg.PostgresControl with args appended (stop or start
// the server), logging a failure: the check then shows what it cost.
func (s *soak) postgres(ctx context.Context, args ...string) {
	argv := append(strings.Fields(s.cfg.PostgresControl), args...)
	out, err := exec.CommandContext(context.WithoutCancel(ctx), argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		s.logf("postgres %s: %v: %s", args[0], err, strings.TrimSpace(string(out)))
		return
	}
	s.logf("postgres %s", args[0])
}

// drain waits until every accepted job is in Postgres and no job is
// live, or cfg.Drain passes.
func (s *soak) drain(ctx context.Context, l *load) {
	deadline := time.Now().Add(s.cfg.Drain)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var live int
		err := s.db.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE status IN ('queued','running','retrying','batched')`).Scan(&live)
		if err == nil && live == 0 {
			missing, err := s.missing(ctx, l)
			if err == nil && len(missing) == 0 {
				return
			}
		}
		time.Sleep(2 * time.Second)
	}
}

// missing lists the accepted jobs not in Postgres.
func (s *soak) missing(ctx context.Context, l *load) ([]string, error) {
	have, err := s.jobKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, k := range l.acceptedKeys() {
		if _, ok := have[k]; !ok {
			out = append(out, k)
		}
	}
	return out, nil
}

// jobKeys maps each job's "tenant/id" to its status.
func (s *soak) jobKeys(ctx context.Context) (map[string]string, error) {
	rows, err := s.db.Query(ctx, `SELECT tenant, id, status FROM jobs`)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for rows.Next() {
		var t, id, st string
		if err := rows.Scan(&t, &id, &st); err != nil {
			return nil, err
		}
		out[t+"/"+id] = st
	}
	return out, rows.Err()
}

// check fills r from Postgres, the front and the processes.
func (s *soak) check(ctx context.Context, r *Report, l *load) error {
	pool := s.db
	keys, err := s.jobKeys(ctx)
	if err != nil {
		return err
	}
	r.JobsByStatus = map[string]int{}
	for k, st := range keys {
		r.JobsByStatus[st]++
		switch st {
		case "queued", "running", "retrying", "batched":
			r.Stuck = append(r.Stuck, k+" "+st)
		}
	}
	if r.Lost, err = s.missing(ctx, l); err != nil {
		return err
	}
	r.Accepted = l.acceptedCount()
	r.Submitted, r.Gateway.Calls, r.Gateway.OK, r.Failed, r.Gateway.Longest = l.figures()
	r.Gateway.Failed = r.Gateway.Calls - r.Gateway.OK
	if r.DeadLetters, err = countBy(ctx, pool, `SELECT reason, count(*) FROM dead_letters GROUP BY reason`); err != nil {
		return err
	}
	for reason, n := range r.DeadLetters {
		if !deadLetterReasonsExpected[reason] {
			r.OutageDeadLetters += n
		}
	}
	if r.FailedJobs, err = countBy(ctx, pool, `SELECT error_code, count(*) FROM jobs WHERE status = 'failed' GROUP BY error_code`); err != nil {
		return err
	}
	rows, err := pool.Query(ctx, `SELECT tenant, project, period, limit_usd::float8, spent_usd::float8 FROM budgets ORDER BY 1, 2, 3`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var t, p, period string
		var limit, spent float64
		if err := rows.Scan(&t, &p, &period, &limit, &spent); err != nil {
			return err
		}
		row := fmt.Sprintf("%s%s %s %.4f USD, spent %.4f", t, strings.TrimPrefix("/"+p, "/"), period, limit, spent)
		r.BudgetRows = append(r.BudgetRows, row)
		if spent > limit+1e-9 {
			r.BudgetOverruns = append(r.BudgetOverruns, row)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	calls, jobs, tenants := s.front.snapshot()
	r.Calls, r.JobsCalled = calls, len(jobs)
	s.killsMu.Lock()
	kills := append([]time.Time(nil), s.kills...)
	s.killsMu.Unlock()
	var killed []string
	r.PaidTwice, killed, r.Unexplained = paidTwice(jobs, kills)
	r.PaidTwiceKilled = len(killed)
	r.QuotaExcess = map[string]int{"globex": bucketExcess(tenants["globex"], globexRPM)}
	for _, p := range append(append([]*proc(nil), s.workers...), s.apis...) {
		r.Procs = append(r.Procs, p.stats())
	}
	return nil
}

// countBy runs sql, rows of a key and a count, into a map.
func countBy(ctx context.Context, pool *pgxpool.Pool, sql string) (map[string]int, error) {
	rows, err := pool.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			return nil, err
		}
		out[cmp.Or(k, "(none)")] = n
	}
	return out, rows.Err()
}

// dropDatabase drops the soak's database.
func dropDatabase(serverURL, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

// deleteQueues deletes the soak's RabbitMQ queues.
func deleteQueues(url, name string) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return
	}
	defer conn.Close()
	for _, q := range []string{name, name + ".rejected", name + dlq.DLQSuffix, name + dlq.DLQSuffix + ".rejected"} {
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		_, _ = ch.QueueDelete(q, false, false, false)
		_ = ch.Close()
	}
}

// cpuModel is the CPU's model name and count.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if k, v, ok := bytes.Cut(line, []byte(":")); ok && string(bytes.TrimSpace(k)) == "model name" {
			return fmt.Sprintf("%s (%d CPUs)", bytes.TrimSpace(v), runtime.NumCPU())
		}
	}
	return runtime.GOARCH
}

// loadAvg is the 1-minute load average.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}
