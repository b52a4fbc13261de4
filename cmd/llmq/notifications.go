package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/store"
)

func init() { register(newNotificationsCmd) }

func newNotificationsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "notifications",
		Short: "List undelivered result events and replay dead ones",
		Long: `notifications works on the outbox of result events in Postgres (LLMQ_DATABASE_URL): the
events of jobs with a route (a reply queue, a results topic, a webhook) not yet delivered,
pending or dead (notification_undeliverable, after the retry period). A delivered event leaves
the outbox. replay makes an event due again now, with the same event id and its retry period
restarted; the worker's notifier sends it. The job is never touched
(docs/design/notifications.md).`,
	}
	cmd.AddCommand(newNotificationsLsCmd(), newNotificationsReplayCmd())
	return cmd
}

func newNotificationsLsCmd() *cobra.Command {
	var (
		f      store.NotificationFilter
		asJSON bool
	)
	cmd := &cobra.Command{Use: "ls", Short: "List undelivered result events, newest first", Args: cobra.NoArgs}
	flags := config.BindFlags(cmd, config.FlagDatabase)
	fs := cmd.Flags()
	fs.StringVar(&f.Tenant, "tenant", "", "tenant")
	fs.StringVar(&f.State, "state", "", "pending or dead")
	fs.StringVar(&f.JobID, "job", "", "job id")
	fs.IntVar(&f.Limit, "limit", 100, "events listed (at most 1000)")
	fs.BoolVar(&asJSON, "json", false, "print JSON ({\"data\": [...], \"next_cursor\": null})")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if f.Limit < 1 || f.Limit > api.MaxNotifications {
			return fmt.Errorf("--limit must be 1-%d", api.MaxNotifications)
		}
		st, err := openNotifications(cmd.Context(), flags)
		if err != nil {
			return err
		}
		defer st.Close()
		ns, err := st.Notifications().List(cmd.Context(), f)
		if err != nil {
			return err
		}
		views := make([]api.Notification, len(ns))
		for i, n := range ns {
			views[i] = api.NewNotificationView(n)
		}
		out := cmd.OutOrStdout()
		if asJSON {
			return writeJSON(out, api.NewList(views, ""))
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "EVENT\tCREATED\tTENANT\tJOB\tSTATUS\tSTATE\tATTEMPTS\tLAST ERROR")
		for _, v := range views {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", v.EventID, v.CreatedAt.UTC().Format(time.RFC3339), v.Tenant,
				v.JobID, v.Status, v.State, v.Attempts, dlqOneLine(v.LastError, 60))
		}
		return tw.Flush()
	}
	return cmd
}

func newNotificationsReplayCmd() *cobra.Command {
	var (
		tenant, job string
		dead        bool
	)
	cmd := &cobra.Command{Use: "replay {EVENT_ID... | --dead}", Short: "Send result events again (same event id); never the job",
		Long: `replay makes the named result events due again now (dead or pending), each with its event
id and its retry period restarted. With --dead it replays every dead event instead (of --tenant,
of --job), as after a webhook endpoint's outage longer than the retry period; pending events keep
their next attempt.`}
	flags := config.BindFlags(cmd, config.FlagDatabase)
	cmd.Flags().StringVar(&tenant, "tenant", "", "only the events of this tenant")
	cmd.Flags().BoolVar(&dead, "dead", false, "every dead event (of --tenant, of --job) instead of named ones")
	cmd.Flags().StringVar(&job, "job", "", "with --dead: only this job's events")
	cmd.RunE = func(cmd *cobra.Command, ids []string) error {
		switch {
		case dead && len(ids) > 0:
			return errors.New("replay: name events or give --dead, not both")
		case !dead && len(ids) == 0:
			return errors.New("replay: name events by id, or give --dead for every dead one")
		case !dead && job != "":
			return errors.New("replay: --job goes with --dead")
		}
		st, err := openNotifications(cmd.Context(), flags)
		if err != nil {
			return err
		}
		defer st.Close()
		out := cmd.OutOrStdout()
		if dead {
			n, err := st.Notifications().ReplayDead(cmd.Context(), tenant, job, time.Now())
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "replayed: %d dead\n", n)
			return nil
		}
		for _, id := range ids {
			if _, err := st.Notifications().Replay(cmd.Context(), tenant, id, time.Now()); err != nil {
				return err
			}
			fmt.Fprintf(out, "replayed: %s\n", id)
		}
		return nil
	}
	return cmd
}

// openNotifications opens the store of the configuration's database.
func openNotifications(ctx context.Context, flags *config.Flags) (*store.Store, error) {
	cfg, err := flags.Load()
	if err != nil {
		return nil, err
	}
	return store.Open(ctx, cfg.DatabaseURL)
}
