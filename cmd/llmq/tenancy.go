package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/store"
)

// Tenants, projects and keys kept as data (docs/design/tenants.md#tenants-as-data),
// changed straight in Postgres: llmq apply, llmq tenants, llmq keys. Every
// replica applies a change within 2 s (LISTEN llmq_tenancy).

func init() {
	register(newApplyCmd)
	register(newTenantsCmd)
	register(newKeysCmd)
}

// cliActor names the CLI's user in the audit log.
func cliActor() string {
	if u, err := user.Current(); err == nil {
		return "cli " + u.Username
	}
	return "cli"
}

// readTenantsFile reads the tenants: and models: sections of a
// configuration file, checked (models as the catalog of anyModel: the
// configuration's allow_any_model). A file without models: leaves the
// models as they are.
func readTenantsFile(path string, anyModel bool) (store.ApplyFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return store.ApplyFile{}, err
	}
	var f struct {
		Tenants llmq.Tenants          `yaml:"tenants"`
		Models  map[string]llmq.Model `yaml:"models"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		return store.ApplyFile{}, fmt.Errorf("%s: %w", path, err)
	}
	errs := f.Tenants.Validate("tenants")
	if f.Models != nil {
		errs = append(errs, llmq.ValidateModels("models", f.Models, anyModel)...)
	}
	if len(errs) > 0 {
		return store.ApplyFile{}, fmt.Errorf("%s: %w", path, errors.Join(errs...))
	}
	if f.Tenants == nil {
		f.Tenants = llmq.Tenants{}
	}
	return store.ApplyFile{Tenants: f.Tenants, Models: f.Models}, nil
}

// printChanges prints a diff line per change: + created, ~ updated, -
// deleted, with the JSON of the values.
func printChanges(w io.Writer, changes []store.Change) {
	js := func(v any) string {
		b, _ := json.Marshal(v)
		return string(b)
	}
	for _, c := range changes {
		switch c.Action {
		case "create":
			fmt.Fprintf(w, "+ %s %s %s\n", c.Kind, c.Name, js(c.New))
		case "update":
			fmt.Fprintf(w, "~ %s %s %s -> %s\n", c.Kind, c.Name, js(c.Old), js(c.New))
		case "delete":
			fmt.Fprintf(w, "- %s %s %s\n", c.Kind, c.Name, js(c.Old))
		}
	}
	if len(changes) == 0 {
		fmt.Fprintln(w, "no change: the database matches the file")
	}
}

func newApplyCmd() *cobra.Command {
	var (
		file   string
		dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "apply -f tenants.yaml",
		Short: "Make the tenants, projects and models in Postgres match a file's tenants: and models: sections (prints the diff first)",
		Long: `apply reads the tenants: and models: sections of a YAML file (the configuration's format),
prints what differs from the tenants, projects and models in Postgres (+ created, ~ changed,
- deleted), and then makes Postgres match it in one transaction, each change in the audit log.
Every worker and API replica applies it within 2 s. A file without models: leaves the models as
they are; a model's fallback must name a model of the file (unless allow_any_model). API keys are
left as they are (llmq keys), except that a tenant the file does not list is deleted with its
projects and keys. With --dry-run it changes nothing.`,
		Args: cobra.NoArgs,
	}
	flags := config.BindFlags(cmd, config.FlagDatabase)
	cmd.Flags().StringVarP(&file, "file", "f", "", "the YAML file whose tenants: section to apply (required)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the diff and change nothing")
	_ = cmd.MarkFlagRequired("file")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return withConfigStore(cmd, flags, func(cfg *config.Config, st *store.Store) error {
			want, err := readTenantsFile(file, cfg.AllowAnyModel)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			tc := st.Tenancy().AnyModel(cfg.AllowAnyModel)
			changes, err := tc.Apply(cmd.Context(), cliActor(), want, true)
			if err != nil {
				return err
			}
			printChanges(out, changes)
			if dryRun || len(changes) == 0 {
				return nil
			}
			applied, err := tc.Apply(cmd.Context(), cliActor(), want, false)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "applied %d changes\n", len(applied))
			return nil
		})
	}
	return cmd
}

func newTenantsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tenants",
		Short: "List, pause and resume the tenants and projects kept in Postgres, and read the audit log",
	}
	flags := persistentDBFlags(cmd)
	cmd.AddCommand(newTenantsLsCmd(flags), newPauseCmd(flags, true), newPauseCmd(flags, false), newAuditCmd(flags))
	return cmd
}

func newTenantsLsCmd(flags *config.Flags) *cobra.Command {
	return &cobra.Command{Use: "ls", Short: "List the tenants and their projects", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withConfigStore(cmd, flags, func(_ *config.Config, st *store.Store) error {
				rows, err := st.Tenancy().Load(cmd.Context())
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "TENANT\tPROJECT\tPAUSED\tWEIGHT\tRPM\tTPM\tCONCURRENCY\tDAILY USD\tMONTHLY USD\tVERSION")
				line := func(tenant, project string, s llmq.Scope, version int64) {
					fmt.Fprintf(tw, "%s\t%s\t%t\t%g\t%g\t%g\t%d\t%g\t%g\t%d\n", tenant, project, s.Paused, s.Weight, s.RPM, s.TPM,
						s.Concurrency, s.DailyCost, s.MonthlyCost, version)
				}
				for _, t := range rows.Tenants {
					line(t.Name, "", t.Scope, t.Version)
					for _, p := range rows.Projects {
						if p.Tenant == t.Name {
							line(t.Name, p.Name, p.Scope, p.Version)
						}
					}
				}
				return tw.Flush()
			})
		}}
}

// newPauseCmd is llmq tenants pause (paused) or resume.
func newPauseCmd(flags *config.Flags, paused bool) *cobra.Command {
	verb := map[bool]string{true: "pause", false: "resume"}[paused]
	var project string
	c := &cobra.Command{Use: verb + " TENANT", Short: map[bool]string{
		true:  "Pause a tenant (or --project): its jobs wait with reason paused, its gateway calls get 429",
		false: "Resume a paused tenant (or --project)"}[paused],
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withConfigStore(cmd, flags, func(_ *config.Config, st *store.Store) error {
				tc, what := st.Tenancy(), "tenant "+args[0]
				if project != "" {
					p, err := tc.Project(cmd.Context(), args[0], project)
					if err != nil {
						return fmt.Errorf("%s/%s: %w", args[0], project, err)
					}
					p.Scope.Paused, what = paused, "project "+args[0]+"/"+project
					if _, err := tc.PutProject(cmd.Context(), cliActor(), p, p.Version); err != nil {
						return err
					}
				} else {
					t, err := tc.Tenant(cmd.Context(), args[0])
					if err != nil {
						return fmt.Errorf("%s: %w", args[0], err)
					}
					t.Scope.Paused = paused
					if _, err := tc.UpdateTenant(cmd.Context(), cliActor(), t, t.Version); err != nil {
						return err
					}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %sd\n", what, verb)
				return nil
			})
		}}
	c.Flags().StringVar(&project, "project", "", "a project of the tenant, not the whole tenant")
	return c
}

func newAuditCmd(flags *config.Flags) *cobra.Command {
	var limit int
	audit := &cobra.Command{Use: "audit", Short: "Print the newest changes of tenants, projects, keys and models", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withConfigStore(cmd, flags, func(_ *config.Config, st *store.Store) error {
				entries, err := st.Tenancy().Audit(cmd.Context(), 0, limit)
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "AT\tWHO\tACTION\tKIND\tNAME\tOLD\tNEW")
				for _, e := range entries {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.At.UTC().Format(time.RFC3339), e.Actor, e.Action, e.Kind, e.Name,
						orDash(string(e.Old)), orDash(string(e.New)))
				}
				return tw.Flush()
			})
		}}
	audit.Flags().IntVar(&limit, "limit", 50, "the most entries to print")
	return audit
}

func newKeysCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "List, create and revoke the tenants' API keys kept in Postgres (hashed)",
	}
	flags := persistentDBFlags(cmd)
	ls := &cobra.Command{Use: "ls", Short: "List the keys: name, tenant, expiry, last use, revocation (never the key)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withConfigStore(cmd, flags, func(_ *config.Config, st *store.Store) error {
				rows, err := st.Tenancy().Load(cmd.Context())
				if err != nil {
					return err
				}
				at := func(t *time.Time) string {
					if t == nil {
						return "-"
					}
					return t.UTC().Format(time.RFC3339)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tTENANT\tCREATED\tEXPIRES\tLAST USED\tREVOKED")
				for _, k := range rows.Keys {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.Name, k.Tenant, at(&k.CreatedAt), at(k.ExpiresAt), at(k.LastUsedAt), at(k.RevokedAt))
				}
				return tw.Flush()
			})
		}}
	var (
		tenant  string
		expires time.Duration
	)
	create := &cobra.Command{Use: "create NAME --tenant TENANT", Short: "Create a key of a tenant and print it, once", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !llmq.ValidID(args[0]) {
				return fmt.Errorf("NAME: must be 1-%d characters of [A-Za-z0-9._:-]", llmq.MaxIDLength)
			}
			if expires < 0 {
				return fmt.Errorf("--expires: %v is in the past", expires)
			}
			return withConfigStore(cmd, flags, func(_ *config.Config, st *store.Store) error {
				raw := make([]byte, 32)
				_, _ = rand.Read(raw) // crypto/rand.Read never fails
				key := api.KeyPrefix + base64.RawURLEncoding.EncodeToString(raw)
				hash := sha256.Sum256([]byte(key))
				row := store.APIKeyRow{Name: args[0], Tenant: tenant, Hash: hash[:]}
				if expires > 0 {
					at := time.Now().Add(expires)
					row.ExpiresAt = &at
				}
				_, err := st.Tenancy().CreateKey(cmd.Context(), cliActor(), row)
				switch {
				case errors.Is(err, store.ErrTenancyExists):
					return fmt.Errorf("NAME: %q is taken (a key's name is never reused, even once revoked)", args[0])
				case errors.Is(err, store.ErrTenancyNotFound):
					return fmt.Errorf("--tenant: no tenant %q", tenant)
				case err != nil:
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "key %s of tenant %s; it is shown this once:\n", args[0], tenant)
				fmt.Fprintln(cmd.OutOrStdout(), key)
				return nil
			})
		}}
	create.Flags().StringVar(&tenant, "tenant", "", "the key's tenant (required)")
	create.Flags().DurationVar(&expires, "expires", 0, "the key stops working after this long (0: never)")
	_ = create.MarkFlagRequired("tenant")
	revoke := &cobra.Command{Use: "revoke NAME", Short: "Revoke a key: every API replica refuses it within 2 s", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withConfigStore(cmd, flags, func(_ *config.Config, st *store.Store) error {
				if _, err := st.Tenancy().RevokeKey(cmd.Context(), cliActor(), args[0], 0); err != nil {
					return fmt.Errorf("%s: %w", args[0], err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "key %s: revoked\n", args[0])
				return nil
			})
		}}
	cmd.AddCommand(ls, create, revoke)
	return cmd
}

// persistentDBFlags binds the database flags (and --config) to cmd for
// every one of its subcommands.
func persistentDBFlags(cmd *cobra.Command) *config.Flags {
	flags := config.BindFlags(cmd, config.FlagDatabase)
	cmd.PersistentFlags().AddFlagSet(cmd.Flags())
	return flags
}
