package main

import (
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/llmq/llmq/internal/app/demo"
	"github.com/llmq/llmq/internal/config"
)

func init() { register(newDemoCmd) }

func newDemoCmd() *cobra.Command {
	var (
		cfg     demo.Config
		verbose bool
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole pipeline in one process against the upstream simulator and show it at work",
		Long: `demo starts the upstream simulator (gpt-4o-mini at 600 RPM / 150k TPM with a fallback model,
a little latency and 2% faults), an embedded Kafka broker (unless LLMQ_BROKER names a real one),
the local Postgres (database llmq_demo, created and migrated, unless LLMQ_DATABASE_URL is set),
the worker with its dead-letter queue and Batch API lane, and the HTTP API. It enqueues a mixed
set of jobs (short and long, every priority, some deferrable) through the API plus a few malformed
messages straight to the broker, shows progress measured from the simulator's own accounting,
and ends with a summary and a curl line to poll a job. It exits non-zero unless every valid job
succeeded and every malformed message was dead-lettered.`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	fs.IntVar(&cfg.Jobs, "jobs", demo.JobsDefault, "valid jobs to enqueue")
	fs.IntVar(&cfg.Malformed, "malformed", 0, "malformed messages to publish (0: one per 60 jobs, at least 3; -1: none)")
	fs.StringVar(&cfg.Listen, "listen", demo.ListenDefault, "address of the HTTP API (port 0: any free port)")
	fs.BoolVar(&cfg.KeepRunning, "keep-running", false, "keep the API and the worker up after the summary until Ctrl-C")
	fs.DurationVar(&cfg.Timeout, "timeout", demo.TimeoutDefault, "give up when the jobs are not all done by then")
	fs.BoolVar(&verbose, "verbose", false, "print the components' logs on stderr")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg.DatabaseURL = os.Getenv(config.EnvDatabaseURL)
		if cfg.DatabaseURL == "" {
			cfg.DatabaseURL = demo.DatabaseURLDefault
		}
		cfg.Broker = os.Getenv(config.EnvBroker)
		cfg.Out = cmd.OutOrStdout()
		if fi, err := os.Stdout.Stat(); err == nil && cfg.Out == os.Stdout {
			cfg.TTY = fi.Mode()&os.ModeCharDevice != 0
		}
		if verbose {
			cfg.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelInfo}))
		}
		sum, err := demo.Run(cmd.Context(), cfg)
		if err != nil {
			return err
		}
		if !sum.Clean() {
			return demo.ErrNotClean
		}
		return nil
	}
	return cmd
}
