package main

import (
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/llmq/llmq/internal/app/bench"
	"github.com/llmq/llmq/internal/redact"
)

func init() { register(newBenchCmd) }

func newBenchCmd() *cobra.Command {
	var (
		cfg     bench.Config
		verbose bool
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Run the design notes' experiments against the simulator and write a Markdown + PNG report",
		Long: `bench runs, in real time against the in-process upstream simulator, with the real worker on the
in-memory transport and a Postgres database created for each run (and dropped after it):
the four shaping strategies under the same 5x overload of a long/short mix, a 5x burst within
10 s, the primary model exhausted (fallback), the adaptive strategy against an unknown quota
that halves mid-run (with the provider's rate-limit headers and without any), a backlog on both kinds of provider with one worker and three replicas,
11 agents calling a tight, flaky provider synchronously, directly and then through the gateway
(llmq api's POST /v1/chat/completions), a backlog of long and short jobs first come then
size-aware (sizes), llmq's own overhead before an instant simulator (throughput: 64 callers
of POST /v1/jobs, on --broker), and the API's reads over HTTP at 10,000, 100,000 and 1,000,000
jobs queued in Postgres (million: about 10 minutes), and Postgres's load by 1, 3 and 6 workers
(fleet). Figures are measured from the simulator's own
accounting (/sim/stats) and, for the agents, from their own calls.
It writes report.md and PNG plots to --out. About 25 minutes with the default --scale (sections 1
to 7 of the committed report took 21m22s on 2 CPUs).`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	fs.StringVar(&cfg.Out, "out", bench.OutDefault, "folder of report.md and the PNG plots")
	fs.StringVar(&cfg.PostgresURL, "database-url", "", "Postgres server on which each run creates and drops its own database (default "+redact.URL(bench.PostgresURLDefault)+")")
	// The flag's first name, kept for the scripts that use it.
	fs.StringVar(&cfg.PostgresURL, "postgres-url", "", "")
	_ = fs.MarkDeprecated("postgres-url", "use --database-url, like every other command")
	fs.Float64Var(&cfg.Scale, "scale", bench.ScaleDefault, "multiply every scenario's duration (quotas are kept)")
	fs.StringSliceVar(&cfg.Only, "only", nil, "run only these scenarios: "+strings.Join(bench.Scenarios, ", ")+" (default: all)")
	fs.StringVar(&cfg.Broker, "broker", "", "broker of the throughput scenario, in a form of LLMQ_BROKER (default: in memory)")
	fs.BoolVar(&verbose, "verbose", false, "print the components' logs on stderr")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg.Progress = cmd.ErrOrStderr()
		if verbose {
			cfg.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelInfo}))
		}
		rep, err := bench.Run(cmd.Context(), cfg)
		if err != nil {
			return err
		}
		for _, f := range rep.Files {
			cmd.Println("wrote", f)
		}
		return nil
	}
	return cmd
}
