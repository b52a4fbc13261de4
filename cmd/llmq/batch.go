package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"github.com/spf13/cobra"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/batchapi"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/store"
)

func init() { register(newBatchCmd) }

func newBatchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "batch",
		Short: "List, show and cancel the provider batches of the batch lane",
		Long: `batch works on the provider batches llmq submitted for deferrable jobs (the batches
table in LLMQ_DATABASE_URL). ls lists them newest first with their status and request
counts; show prints one batch (by llmq id lb_... or provider id batch_...) with its jobs per
status and its cost against live prices, and without an id the batch lane's total saving;
cancel asks the provider (OPENAI_BASE_URL) to cancel a batch: the worker's batch poller
then stores the finished results and sends the other jobs back to the live lane.`,
	}
	cmd.AddCommand(newBatchLsCmd(), newBatchShowCmd(), newBatchCancelCmd())
	return cmd
}

// withBatchStore loads the configuration and opens the store for fn.
func withBatchStore(cmd *cobra.Command, flags *config.Flags, fn func(ctx context.Context, cfg *config.Config, st *store.Store) error) error {
	cfg, err := flags.Load()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	st, err := store.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer st.Close()
	return fn(ctx, cfg, st)
}

func newBatchLsCmd() *cobra.Command {
	var limit int
	var open bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List batches, newest first",
		Args:  cobra.NoArgs,
	}
	flags := config.BindFlags(cmd, config.FlagDatabase)
	cmd.Flags().IntVar(&limit, "limit", 50, "most batches listed")
	cmd.Flags().BoolVar(&open, "open", false, "only batches not yet brought home")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return withBatchStore(cmd, flags, func(ctx context.Context, _ *config.Config, st *store.Store) error {
			bs, err := st.Batches().ListBatches(ctx, limit, open)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tPROVIDER ID\tMODEL\tSTATUS\tJOBS\tDONE\tFAILED\tCREATED\tCOST USD\tSAVING USD")
			for _, b := range bs {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%.6f\t%.6f\n", b.ID, orDash(b.ProviderBatchID), b.Model,
					batchState(b), b.JobCount, b.RequestCompleted, b.RequestFailed, b.CreatedAt.UTC().Format(time.RFC3339),
					b.CostUSD, b.LiveCostUSD-b.CostUSD)
			}
			return w.Flush()
		})
	}
	return cmd
}

func newBatchShowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show [id]",
		Short: "Show one batch, or the batch lane's total cost and saving",
		Args:  cobra.MaximumNArgs(1),
	}
	flags := config.BindFlags(cmd, config.FlagDatabase)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return withBatchStore(cmd, flags, func(ctx context.Context, _ *config.Config, st *store.Store) error {
			out := cmd.OutOrStdout()
			if len(args) == 0 {
				c, err := batchapi.CostReport(ctx, st.Batches(), time.Time{})
				if err != nil {
					return err
				}
				printCost(out, c)
				return nil
			}
			b, err := st.Batches().GetBatch(ctx, args[0])
			if err != nil {
				return err
			}
			counts, err := st.Batches().BatchJobCounts(ctx, b.ID)
			if err != nil {
				return err
			}
			printBatch(out, b, counts)
			return nil
		})
	}
	return cmd
}

func newBatchCancelCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cancel <id>",
		Short: "Ask the provider to cancel a batch",
		Args:  cobra.ExactArgs(1),
	}
	flags := config.BindFlags(cmd, config.FlagDatabase|config.FlagUpstream)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return withBatchStore(cmd, flags, func(ctx context.Context, cfg *config.Config, st *store.Store) error {
			cc := openai.DefaultConfig(cfg.OpenAIAPIKey)
			cc.BaseURL = cfg.OpenAIBaseURL
			cc.HTTPClient = &http.Client{Timeout: time.Minute}
			b, err := batchapi.Cancel(ctx, st.Batches(), batchapi.NewClient(cc, 0), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "batch %s (%s): %s\n", b.ID, b.ProviderBatchID, b.Status)
			return nil
		})
	}
	return cmd
}

func batchState(b *store.BatchRecord) string {
	if store.BatchTerminal(b.Status) && b.IngestedAt == nil {
		return b.Status + " (bringing home)"
	}
	return b.Status
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func printBatch(out io.Writer, b *store.BatchRecord, counts map[llmq.Status]int) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(w, "%s:\t%s\n", k, v) }
	when := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	row("id", b.ID)
	row("provider id", orDash(b.ProviderBatchID))
	row("model", b.Model)
	row("status", batchState(b))
	row("input file", orDash(b.InputFileID))
	row("output file", orDash(b.OutputFileID))
	row("error file", orDash(b.ErrorFileID))
	row("jobs", fmt.Sprint(b.JobCount))
	row("requests", fmt.Sprintf("%d total, %d completed, %d failed", b.RequestTotal, b.RequestCompleted, b.RequestFailed))
	row("created", when(&b.CreatedAt))
	row("submitted", when(b.SubmittedAt))
	row("completed", when(b.CompletedAt))
	row("brought home", when(b.IngestedAt))
	if b.Error != "" {
		row("error", b.Error)
	}
	for _, s := range llmq.Statuses {
		if n, ok := counts[s]; ok {
			row("jobs "+string(s), fmt.Sprint(n))
		}
	}
	row("cost (batch price)", fmt.Sprintf("$%.6f", b.CostUSD))
	row("cost at live price", fmt.Sprintf("$%.6f", b.LiveCostUSD))
	row("saving", fmt.Sprintf("$%.6f", b.LiveCostUSD-b.CostUSD))
	w.Flush()
}

func printCost(out io.Writer, c store.BatchCost) {
	pct := 0.0
	if c.LiveCostUSD > 0 {
		pct = 100 * c.SavingUSD() / c.LiveCostUSD
	}
	fmt.Fprintf(out, "batches brought home: %d\njobs answered by batches: %d\ncost (batch price): $%.6f\ncost at live price: $%.6f\nsaving: $%.6f (%.1f%%)\n",
		c.Batches, c.Jobs, c.CostUSD, c.LiveCostUSD, c.SavingUSD(), pct)
}
