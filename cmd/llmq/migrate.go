package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/migrations"
)

func init() { register(newMigrateCmd) }

func newMigrateCmd() *cobra.Command {
	var down bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create the database if missing and apply the schema migrations (--down rolls back one)",
		Long: `migrate creates the Postgres database named in LLMQ_DATABASE_URL when it does not
exist and applies every pending migration, each in its own transaction. It is a no-op when
the schema is up to date and safe to run from several processes at once (they serialise on
an advisory lock). With --down it rolls back the newest applied migration.`,
		Args: cobra.NoArgs,
	}
	flags := config.BindFlags(cmd, config.FlagDatabase)
	cmd.Flags().BoolVar(&down, "down", false, "roll back the newest applied migration")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := flags.Load()
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		out := cmd.OutOrStdout()
		if down {
			m, err := migrations.Down(ctx, cfg.DatabaseURL)
			if err != nil {
				return err
			}
			if m == nil {
				fmt.Fprintln(out, "migrate: nothing to roll back")
				return nil
			}
			fmt.Fprintf(out, "migrate: rolled back %s\n", m)
			return nil
		}
		created, err := migrations.EnsureDatabase(ctx, cfg.DatabaseURL)
		if err != nil {
			return err
		}
		if created {
			fmt.Fprintln(out, "migrate: created the database")
		}
		applied, err := migrations.Up(ctx, cfg.DatabaseURL)
		if err != nil {
			return err
		}
		for _, m := range applied {
			fmt.Fprintf(out, "migrate: applied %s\n", m)
		}
		if len(applied) == 0 {
			v, err := migrations.Version(ctx, cfg.DatabaseURL)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "migrate: up to date at version %d\n", v)
		}
		return nil
	}
	return cmd
}
