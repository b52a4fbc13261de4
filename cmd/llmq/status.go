package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/internal/redact"
	"github.com/llmq/llmq/store"
)

func init() {
	register(newStatusCmd)
	register(newJobsCmd)
}

func newStatusCmd() *cobra.Command {
	var (
		asJSON bool
		tenant string
	)
	cmd := &cobra.Command{
		Use:   "status [tenant/]<job-id>",
		Short: "Show a job's status, error and result (from Postgres)",
		Long: `status shows one job. Job ids are scoped by tenant: name the tenant with --tenant or as
tenant/id (the form of the key in logs and batch files); the default tenant otherwise.`,
		Args: cobra.ExactArgs(1),
	}
	flags := config.BindFlags(cmd, config.FlagDatabase)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the job as the API does (GET /v1/jobs/{id})")
	cmd.Flags().StringVar(&tenant, "tenant", llmq.DefaultTenant, "the job's tenant")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		key := store.Key{Tenant: tenant, ID: args[0]}
		if k, ok := store.ParseKey(args[0]); ok && !cmd.Flags().Changed("tenant") {
			key = k
		}
		return withJobStore(cmd, flags, func(st *store.Store) error {
			rec, err := st.Jobs().Get(cmd.Context(), key.Tenant, key.ID)
			if errors.Is(err, store.ErrNotFound) {
				return notFound(cmd, st, key)
			}
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(out, api.JobView(rec))
			}
			printJob(out, rec)
			return nil
		})
	}
	return cmd
}

// notFound is status's error for a job key does not name: the command
// that shows the job when other tenants have one of that id (job ids are
// scoped by tenant), else the rule.
func notFound(cmd *cobra.Command, st *store.Store, key store.Key) error {
	tenants, err := st.Jobs().TenantsWithJob(cmd.Context(), key.ID, 3)
	if err != nil {
		return err
	}
	tenants = slices.DeleteFunc(tenants, func(t string) bool { return t == key.Tenant })
	switch len(tenants) {
	case 0:
		return fmt.Errorf("no job %q of tenant %q (job ids are scoped by tenant: give tenant/id or --tenant)", key.ID, key.Tenant)
	case 1:
		return fmt.Errorf("no job %q of tenant %q; tenant %q has one: llmq status %s/%s", key.ID, key.Tenant, tenants[0], tenants[0], key.ID)
	}
	return fmt.Errorf("no job %q of tenant %q; tenants %s have one: llmq status %s/%s", key.ID, key.Tenant,
		strings.Join(tenants, ", "), tenants[0], key.ID)
}

func newJobsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "jobs", Short: "List and prune jobs"}
	cmd.AddCommand(newJobsLsCmd(), newJobsPruneCmd())
	return cmd
}

// newJobsPruneCmd deletes finished jobs now, as the workers' retention
// does on its timer, with one period for every terminal status.
func newJobsPruneCmd() *cobra.Command {
	var olderThan time.Duration
	cmd := &cobra.Command{
		Use:   "prune --older-than DURATION",
		Short: "Delete finished jobs (every terminal status) that ended longer ago than --older-than",
		Long: `Delete finished jobs (succeeded, failed, dead-lettered, expired, cancelled) and their
results that ended longer ago than --older-than, in short statements, as the workers'
retention does on its timer (retention.* in the configuration). A dead-lettered job is
kept while its dead letter is. Each pruned job leaves a tombstone, its id only, so a
late duplicate of its message is never run again; tombstones go after
retention.tombstones.`,
		Args: cobra.NoArgs,
	}
	flags := config.BindFlags(cmd, config.FlagDatabase)
	cmd.Flags().DurationVar(&olderThan, "older-than", 0, "prune jobs that ended longer ago than this (for example 720h); required")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if olderThan <= 0 {
			return errors.New("--older-than: want a positive duration, for example 720h")
		}
		periods := map[llmq.Status]time.Duration{}
		for _, s := range llmq.Statuses {
			if s.Terminal() {
				periods[s] = olderThan
			}
		}
		return withJobStore(cmd, flags, func(st *store.Store) error {
			pruned, err := st.Prune(cmd.Context(), store.Retention{Jobs: periods})
			fmt.Fprintf(cmd.OutOrStdout(), "pruned %s that ended before %s\n", plural(int(pruned["jobs"]), "job", "jobs"),
				time.Now().Add(-olderThan).UTC().Format(time.RFC3339))
			return err
		})
	}
	return cmd
}

func newJobsLsCmd() *cobra.Command {
	var (
		status, tenant, after string
		limit                 int
		asJSON                bool
	)
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List jobs, newest first (all tenants unless --tenant)",
		Args:  cobra.NoArgs,
	}
	flags := config.BindFlags(cmd, config.FlagDatabase)
	fs := cmd.Flags()
	fs.StringVar(&status, "status", "", "only jobs in this status ("+statusNames()+")")
	fs.StringVar(&tenant, "tenant", "", "only this tenant's jobs")
	fs.IntVar(&limit, "limit", 50, fmt.Sprintf("jobs per page (1-%d)", store.ListLimitMax))
	fs.StringVar(&after, "after", "", "cursor printed after the previous page")
	fs.BoolVar(&asJSON, "json", false, `print the page as the API does: {"data": [job...], "next_cursor": ...}`)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if status != "" && !slices.Contains(llmq.Statuses, llmq.Status(status)) {
			return fmt.Errorf("--status %q: want one of %s", status, statusNames())
		}
		if limit < 1 || limit > store.ListLimitMax {
			return fmt.Errorf("--limit must be 1-%d", store.ListLimitMax)
		}
		return withJobStore(cmd, flags, func(st *store.Store) error {
			recs, next, err := st.Jobs().List(cmd.Context(), store.ListOptions{
				Tenant: tenant, AllTenants: true, Status: llmq.Status(status), Limit: limit, After: after})
			if errors.Is(err, store.ErrBadCursor) {
				return fmt.Errorf("--after: not a cursor printed by llmq jobs ls")
			}
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(out, api.JobList(recs, next))
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tTENANT\tSTATUS\tPRIORITY\tMODEL\tATTEMPTS\tCREATED\tERROR")
			for _, r := range recs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, r.Tenant, r.Status, r.Priority,
					r.RequestedModel, r.Attempts, r.CreatedAt.Format(time.RFC3339), jobOneLine(r.ErrorCode, r.ErrorMessage))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if next != "" {
				// The next page of the same listing: every filter kept.
				hint := []string{"llmq", "jobs", "ls"}
				for _, f := range []struct{ name, value string }{{"status", status}, {"tenant", tenant}} {
					if f.value != "" {
						hint = append(hint, "--"+f.name, shellWord(f.value))
					}
				}
				if cmd.Flags().Changed("limit") {
					hint = append(hint, "--limit", strconv.Itoa(limit))
				}
				fmt.Fprintf(out, "more: %s --after %s\n", strings.Join(hint, " "), next)
			}
			return nil
		})
	}
	return cmd
}

func withJobStore(cmd *cobra.Command, flags *config.Flags, fn func(*store.Store) error) error {
	return withConfigStore(cmd, flags, func(_ *config.Config, st *store.Store) error { return fn(st) })
}

// withConfigStore loads the configuration, opens the store and runs fn.
func withConfigStore(cmd *cobra.Command, flags *config.Flags, fn func(*config.Config, *store.Store) error) error {
	cfg, err := flags.Load()
	if err != nil {
		return err
	}
	st, err := store.Open(cmd.Context(), cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer st.Close()
	return fn(cfg, st)
}

func statusNames() string {
	names := make([]string, len(llmq.Statuses))
	for i, s := range llmq.Statuses {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// jobOneLine is a job's error for a table column: sanitised, at most 60
// bytes.
func jobOneLine(code, msg string) string {
	return redact.Text(strings.Join(slices.DeleteFunc([]string{code, msg}, func(s string) bool { return s == "" }), ": "), 60)
}

func printJob(w io.Writer, r *store.JobRecord) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	ts := func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.Format(time.RFC3339Nano)
	}
	row("id", r.ID)
	row("tenant", r.Tenant)
	row("project", r.Project)
	row("status", string(r.Status))
	row("phase", r.Phase)
	row("waiting", r.WaitingReason)
	row("priority", string(r.Priority))
	row("model", r.RequestedModel)
	row("used model", r.UsedModel)
	row("attempts", fmt.Sprint(r.Attempts))
	row("created", r.CreatedAt.Format(time.RFC3339Nano))
	row("started", ts(r.StartedAt))
	row("finished", ts(r.FinishedAt))
	row("deadline", ts(r.Deadline))
	if e := api.JobView(r).Error; e != nil {
		// Whole (sanitised and bounded), not cut to a table column.
		row("error", strings.Join(slices.DeleteFunc([]string{e.Code, e.Message}, func(s string) bool { return s == "" }), ": "))
	}
	if r.PromptTokens != 0 || r.CompletionTokens != 0 {
		row("tokens", fmt.Sprintf("%d prompt, %d completion", r.PromptTokens, r.CompletionTokens))
		row("cost", fmt.Sprintf("$%.6f", r.CostUSD))
	}
	_ = tw.Flush()
	if len(r.Result) > 0 {
		var resp struct {
			Choices []struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
		}
		if json.Unmarshal(r.Result, &resp) == nil && len(resp.Choices) > 0 {
			fmt.Fprintf(w, "answer:\n%s\n", resp.Choices[0].Message.Content)
		} else {
			fmt.Fprintf(w, "result: %s\n", r.Result)
		}
	}
}

// writeJSON prints v indented, as the commands' --json do.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// shellWord quotes s for a POSIX shell when it holds anything but
// [A-Za-z0-9._:/=-], so that a printed command line can be pasted.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:/=-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
