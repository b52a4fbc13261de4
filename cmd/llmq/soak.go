package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/llmq/llmq/internal/app/soak"
	"github.com/llmq/llmq/internal/redact"
)

func init() { register(newSoakCmd) }

func newSoakCmd() *cobra.Command {
	var cfg soak.Config
	cmd := &cobra.Command{
		Use:   "soak",
		Short: "Run 3 workers, 2 API replicas and the simulator under load and overlapping faults, then check every promise",
		Long: `soak runs this binary as 3 workers (two on RabbitMQ, one on Kafka) and 2 API replicas
(one each), every one reaching Postgres and RabbitMQ through a chaos proxy, against the
simulator behind a front that injects provider faults, with an in-process Kafka (kfake). For
--duration it submits --rate jobs a second from four tenants (async jobs through the API and
straight to both brokers, gateway calls, duplicates) while a nemesis driven by --seed injects
overlapping faults: kill -9 and SIGTERM of workers and API replicas (restarted), Postgres
outages and RabbitMQ connection cuts (the proxies), provider outages, 5xx storms, 429 storms,
latency spikes and the provider quota halved, each kind at least 3 times. Then it waits
(at most --drain) for every job to end and checks each promise: nothing lost or stuck, at
most one paid call per job, budgets and tenant quotas kept, provider 429s, dead letters by
reason, gateway failures, peak RSS and log lines per second of each process.

It needs Postgres and RabbitMQ (local by default: --database-url, --rabbitmq-url); it creates
a database and a queue of its own and removes them at the end. It exits 1 when a threshold fails; the
report names the seed that replays the faults (docs/bench/soak.md).`,
		Example: "  llmq soak --duration 15m --seed 7",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("seed") {
				cfg.Seed = rand.Uint64N(1 << 20)
			}
			if cfg.Duration < 10*time.Second {
				return fmt.Errorf("--duration must be at least 10s, got %s", cfg.Duration)
			}
			if cfg.Rate <= 0 || cfg.Rate > 200 {
				return fmt.Errorf("--rate must be in (0, 200] jobs a second, got %v", cfg.Rate)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "llmq soak: seed %d, %s at %v jobs/s\n", cfg.Seed, cfg.Duration, cfg.Rate)
			cfg.Out = out
			r, err := soak.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			r.Command = fmt.Sprintf("llmq soak --duration %s --seed %d --rate %v", cfg.Duration, cfg.Seed, cfg.Rate)
			if cfg.PostgresControl != "" {
				r.Command += fmt.Sprintf(" --postgres-control %q", cfg.PostgresControl)
			}
			r.Print(out, soak.BoundsDefault)
			if f := r.Failures(soak.BoundsDefault); len(f) > 0 {
				return errors.New("soak failed (seed " + fmt.Sprint(cfg.Seed) + "): " + strings.Join(f, "; "))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&cfg.Duration, "duration", soak.DurationDefault, "how long the load and the faults run")
	f.DurationVar(&cfg.Drain, "drain", soak.DrainDefault, "how long to wait after the load for every job to end")
	f.Uint64Var(&cfg.Seed, "seed", 0, "seed of the faults and the load (default: random, printed)")
	f.Float64Var(&cfg.Rate, "rate", soak.RateDefault, "submissions per second")
	f.StringVar(&cfg.Dir, "dir", "", "directory for each process's log (default: a new temporary one)")
	f.BoolVar(&cfg.KeepDatabase, "keep-database", false, "keep the soak's database for inspection")
	f.StringVar(&cfg.PostgresControl, "postgres-control", "", `make each Postgres outage a real stop and start of the server by this command, with "stop" and "start" appended (e.g. "pg_ctlcluster 15 main"); default: a proxy cuts the connections`)
	f.StringVar(&cfg.PostgresURL, "database-url", "", "Postgres server on which the soak creates and drops its own database (default "+redact.URL(soak.PostgresURLDefault)+")")
	f.StringVar(&cfg.RabbitMQ, "rabbitmq-url", "", "RabbitMQ server the soak declares and deletes its own queue on (default the local server, user guest)")
	return cmd
}
