package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/app"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/worker"
)

func init() { register(newWorkerCmd) }

// workerFlags are the worker's own flags; the common ones come from config.
type workerFlags struct {
	strategy        string
	rpm, tpm        int
	concurrency     int
	maxInFlight     int
	metricsListen   string
	shutdownTimeout time.Duration
	provider        string
	dashScopeWait   time.Duration
	upstreamTimeout time.Duration
	lease           time.Duration
	replica         string
	ledgerPeriod    time.Duration
}

func newWorkerCmd() *cobra.Command {
	var wf workerFlags
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Consume jobs from the broker and call the LLM at the shaped rate",
		Long: `worker records the jobs of Kafka or RabbitMQ in Postgres (and acks them), claims from
Postgres what the upstream's RPM, TPM and concurrency limits admit, retries and falls back on
rate limits, stores every result in Postgres, and dead-letters what cannot succeed. SIGTERM or
SIGINT stops ingesting and claiming, hands back the jobs not yet calling, lets the calls in flight
finish within --shutdown-timeout and hands back the rest (other workers claim them).`,
		Args: cobra.NoArgs,
	}
	flags := config.BindFlags(cmd, config.FlagDatabase|config.FlagBroker|config.FlagUpstream)
	fs := cmd.Flags()
	fs.StringVar(&wf.strategy, "strategy", "", "shaping strategy: retry, rpm, shape or adaptive (default: config file, else shape when quotas are known, adaptive when not)")
	fs.IntVar(&wf.rpm, "rpm", 0, "requests per minute of every model the config file does not list (0: unknown)")
	fs.IntVar(&wf.tpm, "tpm", 0, "tokens per minute of every model the config file does not list (0: unknown)")
	fs.IntVar(&wf.concurrency, "concurrency", 0, fmt.Sprintf("calls in flight per model the config file does not list (0: shaping's default, %d)", shaping.LaneConcurrencyDefault))
	fs.IntVar(&wf.maxInFlight, "max-in-flight", worker.MaxInFlightDefault, "jobs held at once (claimed: waiting for quota, calling or backing off)")
	fs.StringVar(&wf.metricsListen, "metrics-listen", app.MetricsListenDefault, "address of the Prometheus /metrics endpoint and of /healthz (empty: none)")
	fs.DurationVar(&wf.shutdownTimeout, "shutdown-timeout", worker.ShutdownTimeoutDefault, "how long in-flight jobs may finish after SIGTERM")
	fs.StringVar(&wf.provider, "provider", string(worker.ProviderOpenAI), "upstream error dialect: openai or dashscope")
	fs.DurationVar(&wf.dashScopeWait, "dashscope-wait-timeout", 0, "send X-DashScope-Wait-Timeout and add it to the client timeout (0: off)")
	fs.DurationVar(&wf.upstreamTimeout, "upstream-timeout", worker.UpstreamTimeoutDefault, "timeout of one upstream call")
	fs.DurationVar(&wf.lease, "lease", worker.LeaseDefault, "how long a claim holds a job unless renewed (a crashed worker's jobs wait this long)")
	fs.StringVar(&wf.replica, "replica", "", "this worker's name in the quota ledger the workers on one API key share their quotas through (default: host:pid:random)")
	fs.DurationVar(&wf.ledgerPeriod, "ledger-period", worker.LedgerPeriodDefault, "how often the worker renews its share of the quotas in the ledger")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := flags.Load()
		if err != nil {
			return err
		}
		logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelInfo}))
		return runWorker(cmd.Context(), cfg, wf, logger)
	}
	return cmd
}

// runWorker runs the worker of cfg until ctx is done.
func runWorker(ctx context.Context, cfg *config.Config, wf workerFlags, logger *slog.Logger) error {
	strategy, err := shaping.ParseStrategy(cmp.Or(wf.strategy, cfg.Strategy))
	if err != nil {
		return fmt.Errorf("--strategy: %w", err)
	}
	provider, err := worker.ParseProvider(wf.provider)
	if err != nil {
		return fmt.Errorf("--provider: %w", err)
	}
	a, err := app.New(ctx, app.Config{
		Settings: cfg, Migrate: true, MetricsListen: wf.metricsListen, Logger: logger,
		Worker: &app.WorkerConfig{
			Strategy:             strategy,
			DefaultModel:         llmq.Model{RPM: float64(wf.rpm), TPM: float64(wf.tpm), Concurrency: wf.concurrency},
			MaxInFlight:          wf.maxInFlight,
			ShutdownTimeout:      wf.shutdownTimeout,
			Lease:                wf.lease,
			Replica:              wf.replica,
			LedgerPeriod:         wf.ledgerPeriod,
			Provider:             provider,
			UpstreamTimeout:      wf.upstreamTimeout,
			DashScopeWaitTimeout: wf.dashScopeWait,
		},
	})
	if err != nil {
		return err
	}
	return a.Run(ctx)
}
