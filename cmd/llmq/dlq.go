package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/open"
)

func init() { register(newDLQCmd) }

func newDLQCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List, show, replay and purge dead letters",
		Long: `dlq works on the dead letters recorded in Postgres (LLMQ_DATABASE_URL): the jobs llmq
gave up on, with the reason, the last error and the original message.

Filters (ls, replay, purge): --id (letter ids, repeatable), --job, --reason (poison,
retries_exhausted, permanent_error, expired), --tenant, --since and --until (RFC 3339 time,
or a duration meaning that long ago, e.g. 24h).

replay republishes each letter's original message to the main topic or queue of
LLMQ_BROKER with the job requeued and its attempts reset; a letter is replayed once,
replaying it again does nothing. purge deletes letters and refuses to run without a
filter (--all purges every letter).`,
	}
	cmd.AddCommand(newDLQLsCmd(), newDLQShowCmd(), newDLQReplayCmd(), newDLQPurgeCmd())
	return cmd
}

// dlqFilterFlags are the filter flags shared by ls, replay and purge.
type dlqFilterFlags struct {
	ids          []int64
	job, reason  string
	tenant       string
	since, until string
}

func (f *dlqFilterFlags) bind(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.Int64SliceVar(&f.ids, "id", nil, "dead letter id (repeatable, or comma-separated)")
	fs.StringVar(&f.job, "job", "", "job id")
	fs.StringVar(&f.reason, "reason", "", "reason: poison, retries_exhausted, permanent_error, expired")
	fs.StringVar(&f.tenant, "tenant", "", "tenant")
	fs.StringVar(&f.since, "since", "", "dead-lettered at or after: RFC 3339 time or a duration ago (24h)")
	fs.StringVar(&f.until, "until", "", "dead-lettered before: RFC 3339 time or a duration ago")
}

func (f *dlqFilterFlags) filter(now time.Time) (store.DeadLetterFilter, error) {
	out := store.DeadLetterFilter{IDs: f.ids, JobID: f.job, Reason: f.reason, Tenant: f.tenant}
	var err error
	if out.Since, err = parseWhen("since", f.since, now); err != nil {
		return out, err
	}
	if out.Until, err = parseWhen("until", f.until, now); err != nil {
		return out, err
	}
	return out, nil
}

// parseWhen reads an RFC 3339 time or a duration before now; "" is zero.
func parseWhen(flag, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("--%s %q: want an RFC 3339 time or a positive duration such as 24h", flag, v)
	}
	return now.Add(-d), nil
}

// dlqEnv is what a dlq subcommand works with.
type dlqEnv struct {
	svc   *dlq.Service
	close func()
}

// openDLQ loads the configuration and opens the store, plus the broker
// publisher when withBroker is set.
func openDLQ(ctx context.Context, flags *config.Flags, withBroker bool) (*dlqEnv, error) {
	cfg, err := flags.Load()
	if err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	closers := []func(){st.Close}
	env := &dlqEnv{close: func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}}
	var pub transport.Publisher
	if withBroker {
		if cfg.Broker.Kind == config.BrokerEmbedded {
			env.close()
			return nil, errors.New("LLMQ_BROKER=embedded lives inside the llmq process that started it: " +
				"replay through that process's HTTP API (POST /v1/dead-letters/{id}/replay) or set a kafka:// or amqp:// broker")
		}
		p, sub, err := open.Open(ctx, cfg.Broker.Raw, open.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			env.close()
			return nil, err
		}
		_ = sub.Close() // only the publisher is used
		pub = p
		closers = append(closers, func() { _ = p.Close() })
	}
	env.svc, err = dlq.NewService(dlq.Config{Store: st, Publisher: pub, Destination: cfg.Broker.Destination()})
	if err != nil {
		env.close()
		return nil, err
	}
	return env, nil
}

func newDLQLsCmd() *cobra.Command {
	var (
		f      dlqFilterFlags
		limit  int
		cursor string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List dead letters, newest first",
		Args:  cobra.NoArgs,
	}
	flags := config.BindFlags(cmd)
	f.bind(cmd)
	cmd.Flags().IntVar(&limit, "limit", 50, "letters per page (at most 1000)")
	cmd.Flags().StringVar(&cursor, "cursor", "", "continue after the page that printed this cursor")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON ({\"data\": [...], \"next_cursor\": ...})")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		filter, err := f.filter(time.Now())
		if err != nil {
			return err
		}
		env, err := openDLQ(cmd.Context(), flags, false)
		if err != nil {
			return err
		}
		defer env.close()
		recs, next, err := env.svc.List(cmd.Context(), store.DeadLetterListOptions{DeadLetterFilter: filter, Limit: limit, After: cursor})
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if asJSON {
			var nc *string
			if next != "" {
				nc = &next
			}
			return dlqWriteJSON(out, struct {
				Data       []*store.DeadLetter `json:"data"`
				NextCursor *string             `json:"next_cursor"`
			}{recs, nc})
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tDEAD-LETTERED\tTENANT\tREASON\tJOB\tATTEMPTS\tPUBLISHED\tREPLAYED\tLAST ERROR")
		for _, r := range recs {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.ID, r.CreatedAt.UTC().Format(time.RFC3339),
				r.Tenant, r.Reason, dlqDash(r.JobID), r.Attempts, dlqYesNo(r.PublishedAt != nil),
				dlqYesNo(r.ReplayedAt != nil), dlqOneLine(r.LastError, 60))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if next != "" {
			fmt.Fprintf(out, "more: --cursor %s\n", next)
		}
		return nil
	}
	return cmd
}

func newDLQShowCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show one dead letter with its original message",
		Args:  cobra.ExactArgs(1),
	}
	flags := config.BindFlags(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := strconv.ParseInt(args[0], 10, 64)
		if err != nil {
			return fmt.Errorf("dead letter id %q is not a number", args[0])
		}
		env, err := openDLQ(cmd.Context(), flags, false)
		if err != nil {
			return err
		}
		defer env.close()
		r, err := env.svc.Get(cmd.Context(), "", id)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if asJSON {
			return dlqWriteJSON(out, r)
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
		row("id", strconv.FormatInt(r.ID, 10))
		row("job", dlqDash(r.JobID))
		row("tenant", r.Tenant)
		row("reason", string(r.Reason))
		row("attempts", strconv.Itoa(r.Attempts))
		row("model", dlqDash(r.Model))
		row("dead-lettered", r.CreatedAt.UTC().Format(time.RFC3339Nano))
		row("source", dlqDash(r.Source))
		row("destination", r.Destination)
		row("published", dlqTime(r.PublishedAt))
		row("replayed", dlqTime(r.ReplayedAt))
		row("last error", r.LastError)
		for k, v := range r.Headers {
			row("header "+k, v)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(out, "message:")
		var pretty any
		if json.Unmarshal(r.Message, &pretty) == nil {
			return dlqWriteJSON(out, pretty)
		}
		fmt.Fprintf(out, "%q\n", r.Message)
		return nil
	}
	return cmd
}

func newDLQReplayCmd() *cobra.Command {
	var f dlqFilterFlags
	cmd := &cobra.Command{
		Use:   "replay [ID...]",
		Short: "Republish dead letters to the main queue with attempts reset (once per letter)",
		Long: `replay republishes the original message of each selected letter to the main topic or
queue of LLMQ_BROKER and requeues its job with attempts reset. Select letters by id
(arguments or --id) or by filters; at least one is required. A letter already replayed is
skipped, so running the same replay twice gives one new attempt per letter.`,
	}
	flags := config.BindFlags(cmd)
	f.bind(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		for _, a := range args {
			id, err := strconv.ParseInt(a, 10, 64)
			if err != nil {
				return fmt.Errorf("dead letter id %q is not a number", a)
			}
			f.ids = append(f.ids, id)
		}
		filter, err := f.filter(time.Now())
		if err != nil {
			return err
		}
		if filter.Empty() {
			return errors.New("replay: name letters by id or give a filter (--id, --job, --reason, --tenant, --since, --until)")
		}
		ctx := cmd.Context()
		env, err := openDLQ(ctx, flags, true)
		if err != nil {
			return err
		}
		defer env.close()
		out := cmd.OutOrStdout()
		// Collect first: replaying while paging would shift the pages.
		var ids []int64
		for cursor := ""; ; {
			recs, next, err := env.svc.List(ctx, store.DeadLetterListOptions{DeadLetterFilter: filter, Limit: store.ListLimitMax, After: cursor})
			if err != nil {
				return err
			}
			for _, r := range recs {
				ids = append(ids, r.ID)
			}
			if next == "" {
				break
			}
			cursor = next
		}
		replayed, skipped := 0, 0
		var errs []error
		for _, id := range ids {
			res, err := env.svc.Replay(ctx, "", id)
			switch {
			case err != nil:
				errs = append(errs, err)
				fmt.Fprintf(out, "%d\tfailed: %v\n", id, err)
			case res.Replayed:
				replayed++
				fmt.Fprintf(out, "%d\treplayed\t%s\n", id, dlqDash(res.Record.JobID))
			default:
				skipped++
				fmt.Fprintf(out, "%d\talready replayed\t%s\n", id, dlqDash(res.Record.JobID))
			}
		}
		fmt.Fprintf(out, "replay: %d replayed, %d already replayed, %d failed\n", replayed, skipped, len(errs))
		return errors.Join(errs...)
	}
	return cmd
}

func newDLQPurgeCmd() *cobra.Command {
	var (
		f   dlqFilterFlags
		all bool
	)
	cmd := &cobra.Command{
		Use:   "purge",
		Short: "Delete dead letters (a filter or --all is required)",
		Args:  cobra.NoArgs,
	}
	flags := config.BindFlags(cmd)
	f.bind(cmd)
	cmd.Flags().BoolVar(&all, "all", false, "purge every dead letter")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		filter, err := f.filter(time.Now())
		if err != nil {
			return err
		}
		filter.All = all
		env, err := openDLQ(cmd.Context(), flags, false)
		if err != nil {
			return err
		}
		defer env.close()
		n, err := env.svc.Purge(cmd.Context(), filter)
		if errors.Is(err, dlq.ErrEmptyFilter) {
			return fmt.Errorf("%w: give --id, --job, --reason, --tenant, --since or --until, or --all", err)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "purge: %d dead letters deleted\n", n)
		return nil
	}
	return cmd
}

func dlqWriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func dlqDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func dlqYesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func dlqTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// dlqOneLine shortens s to one line of at most n runes.
func dlqOneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
