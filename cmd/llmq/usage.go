package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/store"
)

func init() {
	register(newUsageCmd)
}

func newUsageCmd() *cobra.Command {
	var (
		asJSON bool
		tenant string
	)
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Show each tenant's and project's weight, limits, usage and budgets (the configuration and Postgres)",
		Long: `usage lists the configured tenants and projects, and every tenant with jobs finished today:
weight, limits (0: none), and the upstream calls and tokens of the jobs that finished in the last
minute and since 00:00 UTC; then each cost budget in its current period: the limit, the settled
spend, the reservations of calls in flight, the state (ok, 70, 90, exceeded), the overage policy
and which jobs it holds. The same as GET /v1/usage with an operator key.`,
		Args: cobra.NoArgs,
	}
	flags := config.BindFlags(cmd, config.FlagDatabase)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the scopes as the API does (GET /v1/usage)")
	cmd.Flags().StringVar(&tenant, "tenant", "", "one tenant (default: every tenant)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return withConfigStore(cmd, flags, func(cfg *config.Config, st *store.Store) error {
			// Once imported, the tenants are Postgres's
			// (docs/design/tenants.md#tenants-as-data).
			rows, err := st.Tenancy().Load(cmd.Context())
			if err != nil {
				return err
			}
			if rows.Imported {
				cfg.Tenants = rows.AsTenants()
			}
			if err := knownTenant(cmd.Context(), cfg, st, tenant); err != nil {
				return err
			}
			used, err := st.Budgets().Usage(cmd.Context(), tenant)
			if err != nil {
				return err
			}
			budgets, err := st.Budgets().BudgetUsages(cmd.Context(), tenant)
			if err != nil {
				return err
			}
			list := api.UsageList(cfg.Tenants, tenant, used, budgets)
			out := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(out, list)
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TENANT\tPROJECT\tWEIGHT\tRPM\tTPM\tCONCURRENCY\tPRIORITY\tCALLS/MIN\tTOKENS/MIN\tCALLS TODAY\tTOKENS TODAY")
			for _, s := range list.Data {
				fmt.Fprintf(tw, "%s\t%s\t%g\t%g\t%g\t%d\t%s\t%d\t%d\t%d\t%d\n", s.Tenant, s.Project, s.Weight,
					s.Limits.RPM, s.Limits.TPM, s.Limits.Concurrency, s.Limits.Priority,
					s.LastMinute.Requests, s.LastMinute.Tokens, s.Today.Requests, s.Today.Tokens)
			}
			if err := tw.Flush(); err != nil || len(budgets) == 0 {
				return err
			}
			fmt.Fprintln(out)
			fmt.Fprintln(tw, "TENANT\tPROJECT\tPERIOD\tBUDGET USD\tSPENT USD\tRESERVED USD\tSTATE\tOVERAGE\tHOLDING")
			for _, s := range list.Data {
				for _, b := range s.Budgets {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.4f\t%.4f\t%s\t%s\t%s\n", s.Tenant, s.Project, b.Period,
						b.LimitUSD, b.SpentUSD, b.ReservedUSD, b.State, b.Overage, b.Holding)
				}
			}
			return tw.Flush()
		})
	}
	return cmd
}

// knownTenant fails for a tenant that neither the configuration (tenants,
// api_keys) nor Postgres (a job) knows: its usage would be zeros, and a
// misspelt name should not look like an idle tenant. "" is every tenant.
func knownTenant(ctx context.Context, cfg *config.Config, st *store.Store, tenant string) error {
	if _, ok := cfg.Tenants[tenant]; ok || tenant == "" || slices.Contains(slices.Collect(maps.Values(cfg.APIKeys)), tenant) {
		return nil
	}
	jobs, _, err := st.Jobs().List(ctx, store.ListOptions{Tenant: tenant, Limit: 1})
	if err != nil || len(jobs) > 0 {
		return err
	}
	return fmt.Errorf("no tenant %q: the configuration names none and no job of it is in Postgres", tenant)
}
