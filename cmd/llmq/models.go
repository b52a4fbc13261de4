package main

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/store"
)

// The models kept as data (docs/design/tenants.md#models-as-data): llmq
// models ls | set | rm, changed straight in Postgres; every worker applies a
// change of a model's limits to its lanes within 2 s.

func init() { register(newModelsCmd) }

func newModelsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "models",
		Short: "List, set and remove the models kept in Postgres: limits, context window, prices, fallbacks",
	}
	flags := persistentDBFlags(cmd)
	ls := &cobra.Command{Use: "ls", Short: "List the models and their limits", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withConfigStore(cmd, flags, func(_ *config.Config, st *store.Store) error {
				rows, err := st.Tenancy().Load(cmd.Context())
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "MODEL\tRPM\tTPM\tCONCURRENCY\tCONTEXT\tIN USD/1M\tOUT USD/1M\tFALLBACKS\tVERSION")
				for _, r := range rows.Models {
					m := r.Model
					fmt.Fprintf(tw, "%s\t%g\t%g\t%d\t%d\t%g\t%g\t%s\t%d\n", r.Name, m.RPM, m.TPM, m.Concurrency, m.ContextWindow,
						m.InputPricePer1M, m.OutputPricePer1M, orDash(strings.Join(m.Fallbacks, ",")), r.Version)
				}
				return tw.Flush()
			})
		}}
	rm := &cobra.Command{Use: "rm MODEL", Short: "Remove a model: jobs naming it are refused (unless allow_any_model)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withConfigStore(cmd, flags, func(cfg *config.Config, st *store.Store) error {
				if err := st.Tenancy().AnyModel(cfg.AllowAnyModel).DeleteModel(cmd.Context(), cliActor(), args[0], 0); err != nil {
					return fmt.Errorf("%s: %w", args[0], err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "model %s: removed\n", args[0])
				return nil
			})
		}}
	cmd.AddCommand(ls, newModelsSetCmd(flags), rm)
	return cmd
}

// newModelsSetCmd is llmq models set: the settings named by flags change,
// the others stay; a model not held is created.
func newModelsSetCmd(flags *config.Flags) *cobra.Command {
	var m llmq.Model
	set := &cobra.Command{Use: "set MODEL [--rpm N] [--tpm N] [--concurrency N] ...",
		Short: "Create a model or change the settings named (every worker applies new limits within 2 s)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withConfigStore(cmd, flags, func(cfg *config.Config, st *store.Store) error {
				tc := st.Tenancy().AnyModel(cfg.AllowAnyModel)
				row, err := tc.Model(cmd.Context(), args[0])
				version := row.Version
				switch {
				case errors.Is(err, store.ErrTenancyNotFound):
					row, version = store.ModelRow{Name: args[0]}, -1
				case err != nil:
					return err
				}
				f := cmd.Flags()
				for name, apply := range map[string]func(){
					"rpm": func() { row.Model.RPM = m.RPM }, "tpm": func() { row.Model.TPM = m.TPM },
					"concurrency":        func() { row.Model.Concurrency = m.Concurrency },
					"context-window":     func() { row.Model.ContextWindow = m.ContextWindow },
					"max-output-default": func() { row.Model.MaxOutputDefault = m.MaxOutputDefault },
					"input-price":        func() { row.Model.InputPricePer1M = m.InputPricePer1M },
					"output-price":       func() { row.Model.OutputPricePer1M = m.OutputPricePer1M },
					"batch-discount":     func() { row.Model.BatchDiscount = m.BatchDiscount },
					"fallbacks":          func() { row.Model.Fallbacks = m.Fallbacks },
				} {
					if f.Changed(name) {
						apply()
					}
				}
				if _, err := tc.PutModel(cmd.Context(), cliActor(), row, version); err != nil {
					return fmt.Errorf("%s: %w", args[0], err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "model %s: set\n", args[0])
				return nil
			})
		}}
	f := set.Flags()
	f.Float64Var(&m.RPM, "rpm", 0, "requests per minute (0: unknown, learned)")
	f.Float64Var(&m.TPM, "tpm", 0, "tokens per minute (0: unknown, learned)")
	f.IntVar(&m.Concurrency, "concurrency", 0, "calls in flight (0: the default)")
	f.IntVar(&m.ContextWindow, "context-window", 0, "prompt + output limit in tokens (0: not checked)")
	f.IntVar(&m.MaxOutputDefault, "max-output-default", 0, "output allowance of a job without max_tokens (0: the default)")
	f.Float64Var(&m.InputPricePer1M, "input-price", 0, "USD per million prompt tokens")
	f.Float64Var(&m.OutputPricePer1M, "output-price", 0, "USD per million completion tokens")
	f.Float64Var(&m.BatchDiscount, "batch-discount", 0, "price factor of a Batch API call, in (0, 1] (0: the default)")
	f.StringSliceVar(&m.Fallbacks, "fallbacks", nil, "models to fall back to, in order (each a model kept)")
	return set
}
