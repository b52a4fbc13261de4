package bench

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/app"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/shaping"
)

// The fleet scenario measures Postgres's load as the workers grow
// (docs/design/scale.md): 1, 3 and 6 workers (each its own pool, replica
// and scheduler, in one process) behind one API, on an instant upstream.
// Idle, it counts what the fleet costs with no job (ledger, heartbeats,
// LISTEN); loaded, what each job adds. Postgres's transactions are
// pg_stat_database's commits and rollbacks of the run's database (one per
// statement outside a transaction), its CPU the /proc ticks of the
// database's backends (when Postgres runs on this machine).
var fleetSizes = []int{1, 3, 6}

const (
	// fleetJobs is the jobs of a loaded run at scale 1.
	fleetJobs = 4000
	// fleetIdle is how long an idle run is measured at scale 1.
	fleetIdle = 20 * time.Second
)

// FleetRow is one fleet size's measure.
type FleetRow struct {
	Workers int
	// IdleXacts and IdleCPU are Postgres's transactions per second and
	// CPU (cores) with no job.
	IdleXacts, IdleCPU float64
	// Jobs ran at JobsPerSec; LoadXacts and LoadCPU are per second while
	// they ran; XactsPerJob and CPUPerJob what each added over idle.
	Jobs                     int
	JobsPerSec               float64
	LoadXacts, LoadCPU       float64
	XactsPerJob, CPUMsPerJob float64
}

// pgSample is a database's transaction count and its backends' CPU ticks.
type pgSample struct {
	at    time.Time
	xacts int64
	ticks map[int]int64
}

func samplePG(ctx context.Context, pool *pgxpool.Pool, db string) (pgSample, error) {
	s := pgSample{at: time.Now(), ticks: map[int]int64{}}
	if err := pool.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1`, db).Scan(&s.xacts); err != nil {
		return s, fmt.Errorf("bench: fleet: %w", err)
	}
	rows, err := pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = $1`, db)
	if err != nil {
		return s, fmt.Errorf("bench: fleet: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			return s, err
		}
		if t, ok := procTicks(pid); ok {
			s.ticks[pid] = t
		}
	}
	return s, rows.Err()
}

// procTicks is a process's user and system CPU in clock ticks (1/100 s).
func procTicks(pid int) (int64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The fields after the command (which may hold spaces) in parentheses.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	return u + s, err1 == nil && err2 == nil
}

// rates are the transactions and CPU cores per second from a to b.
func (a pgSample) rates(b pgSample) (xacts, cpu float64) {
	secs := b.at.Sub(a.at).Seconds()
	var ticks int64
	for pid, t := range b.ticks {
		ticks += t - a.ticks[pid] // a backend opened since: all its ticks
	}
	return float64(b.xacts-a.xacts) / secs, float64(ticks) / 100 / secs
}

// fleet runs the scenario and writes its section.
func (b *Bench) fleet(ctx context.Context, md *strings.Builder, rep *Report) error {
	jobs := max(500, int(math.Round(fleetJobs*b.cfg.Scale)))
	idle := max(3*time.Second, time.Duration(float64(fleetIdle)*b.cfg.Scale))
	for _, n := range fleetSizes {
		fmt.Fprintf(b.cfg.Progress, "bench: %-18s %d workers, %d jobs ...", "fleet", n, jobs)
		row, err := b.runFleet(ctx, n, jobs, idle)
		if err != nil {
			fmt.Fprintln(b.cfg.Progress, " failed")
			return err
		}
		fmt.Fprintf(b.cfg.Progress, " %.0f jobs/s\n", row.JobsPerSec)
		rep.Fleet = append(rep.Fleet, row)
	}
	fmt.Fprintf(md, `## Fleet: Postgres's load by workers

1, 3 and 6 workers (each its own pool, replica and scheduler, in one process) behind one API, on an
instant upstream; %d jobs posted as fast as %d callers can. *Idle*: %s with no job (quota ledger,
heartbeats, LISTEN). *Loaded*: while the jobs ran. Transactions are pg_stat_database's of the run's
database; CPU is its backends' (cores). docs/design/scale.md extrapolates them.

| workers | idle xact/s | idle CPU | jobs/s | loaded xact/s | loaded CPU | xact per job | CPU ms per job |
|---:|---:|---:|---:|---:|---:|---:|---:|
`, jobs, throughputClients, idle)
	for _, r := range rep.Fleet {
		fmt.Fprintf(md, "| %d | %.1f | %.3f | %.0f | %.0f | %.2f | %.1f | %.2f |\n", r.Workers, r.IdleXacts, r.IdleCPU,
			r.JobsPerSec, r.LoadXacts, r.LoadCPU, r.XactsPerJob, r.CPUMsPerJob)
	}
	return nil
}

// runFleet runs n workers and an API in a database of their own.
func (b *Bench) runFleet(ctx context.Context, n, jobs int, idle time.Duration) (FleetRow, error) {
	row := FleetRow{Workers: n, Jobs: jobs}
	dbURL, drop, err := b.database(ctx)
	if err != nil {
		return row, err
	}
	defer drop()
	_, root, stop, err := b.instantSim(ctx, "fleet")
	if err != nil {
		return row, err
	}
	defer stop()
	broker, err := config.ParseBroker("memory://fleet-" + uuid.NewString()[:8] + "/" + queueName)
	if err != nil {
		return row, fmt.Errorf("bench: fleet: %w", err)
	}
	settings := &config.Config{DatabaseURL: dbURL, Broker: broker, OpenAIBaseURL: root + "/v1", OpenAIAPIKey: simAPIKey,
		Models: map[string]llmq.Model{Primary: {}}, APIKeys: map[string]string{throughputKey: tenant},
		RateLimits: config.RateLimits{KeyRPM: -1, TenantRPM: -1}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return row, err
	}
	var apps []*app.App
	defer func() {
		for _, a := range apps {
			_ = a.Stop(ctx)
		}
	}()
	if err := b.startFleet(ctx, n, settings, ln, &apps); err != nil {
		return row, err
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return row, fmt.Errorf("bench: fleet: %w", err)
	}
	defer pool.Close()
	u, err := url.Parse(dbURL)
	if err != nil {
		return row, fmt.Errorf("bench: fleet: %w", err)
	}
	db := strings.TrimPrefix(u.Path, "/")
	// Idle: past the workers' start, then a window with no job.
	if err := sleepCtx(ctx, 2*time.Second); err != nil {
		return row, err
	}
	s0, err := samplePG(ctx, pool, db)
	if err != nil {
		return row, err
	}
	if err := sleepCtx(ctx, idle); err != nil {
		return row, err
	}
	s1, err := samplePG(ctx, pool, db)
	if err != nil {
		return row, err
	}
	row.IdleXacts, row.IdleCPU = s0.rates(s1)
	if _, err := postJobs(ctx, "http://"+ln.Addr().String()+"/v1/jobs", jobs); err != nil {
		return row, err
	}
	if err := awaitSucceeded(ctx, pool, jobs, 250*time.Millisecond); err != nil {
		return row, fmt.Errorf("bench: fleet: %w", err)
	}
	s2, err := samplePG(ctx, pool, db)
	if err != nil {
		return row, err
	}
	row.LoadXacts, row.LoadCPU = s1.rates(s2)
	secs := s2.at.Sub(s1.at).Seconds()
	row.JobsPerSec = float64(jobs) / secs
	row.XactsPerJob = (row.LoadXacts - row.IdleXacts) * secs / float64(jobs)
	row.CPUMsPerJob = (row.LoadCPU - row.IdleCPU) * secs * 1000 / float64(jobs)
	return row, nil
}

// startFleet starts n apps on settings, each a worker and the first also
// the API on ln, appending each to apps as it is made.
func (b *Bench) startFleet(ctx context.Context, n int, settings *config.Config, ln net.Listener, apps *[]*app.App) error {
	for i := range n {
		cfg := app.Config{Settings: settings, Migrate: i == 0, Logger: b.log,
			Worker: &app.WorkerConfig{Strategy: shaping.StrategyRetry, MaxInFlight: throughputInFlight / n,
				ShutdownTimeout: shutdownTimeout, UpstreamTimeout: 30 * time.Second, NoBatchLane: true}}
		if i == 0 {
			cfg.API = &app.APIConfig{Listener: ln}
		}
		a, err := app.New(ctx, cfg)
		if err != nil {
			return fmt.Errorf("bench: fleet: %w", err)
		}
		*apps = append(*apps, a)
		if err := a.Start(ctx); err != nil {
			return err
		}
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
