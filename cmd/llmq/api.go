package main

import (
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/llmq/llmq/internal/app"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/producer"
)

func init() { register(newAPICmd) }

func newAPICmd() *cobra.Command {
	var (
		listen        string
		sweepInterval time.Duration
		sweepGrace    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "api",
		Short: "Serve the HTTP job API (enqueue, status, cancel, queue backpressure) and run the outbox sweeper",
		Long: `api serves POST/GET/DELETE /v1/jobs, GET /v1/queue, /v1/dead-letters, /healthz, /readyz,
/metrics and /openapi.yaml. API keys come from LLMQ_API_KEYS (key1:tenantA,...) or api_keys in
the config file; backpressure thresholds from backpressure.soft_depth / hard_depth.

Jobs are recorded in Postgres before they are published; the outbox sweeper republishes any
job whose publish was not confirmed (a crash, a broker outage) after --sweep-grace.
SIGINT/SIGTERM stop accepting connections, finish the requests in flight and stop the sweeper.`,
		Args: cobra.NoArgs,
	}
	flags := config.BindFlags(cmd, config.FlagDatabase|config.FlagBroker|config.FlagAPIKeys)
	fs := cmd.Flags()
	fs.StringVar(&listen, "listen", app.APIListenDefault, "address to serve on")
	fs.DurationVar(&sweepInterval, "sweep-interval", producer.SweepIntervalDefault, "time between outbox sweeps")
	fs.DurationVar(&sweepGrace, "sweep-grace", producer.SweepGraceDefault, "age of an unconfirmed job before the sweeper republishes it")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := flags.Load()
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		// Like llmq worker, the API brings the schema up to date itself
		// (idempotent, and safe against a worker migrating at the same time).
		a, err := app.New(ctx, app.Config{
			Settings: cfg, Migrate: true, Logger: slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)),
			API: &app.APIConfig{Listen: listen, SweepInterval: sweepInterval, SweepGrace: sweepGrace},
		})
		if err != nil {
			return err
		}
		return a.Run(ctx)
	}
	return cmd
}
