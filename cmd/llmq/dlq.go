package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/internal/redact"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/open"
	"github.com/llmq/llmq/transport/rabbitmq"
)

func init() { register(newDLQCmd) }

func newDLQCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List, show, replay, purge and drain dead letters",
		Long: `dlq works on the dead letters recorded in Postgres (LLMQ_DATABASE_URL): the jobs llmq
gave up on, with the reason, the last error and the original message.

Filters (ls, replay, purge): --id (letter ids, repeatable), --job, --reason (` + dlqReasonNames() + `),
--tenant, --since and --until (RFC 3339 time, or a duration meaning that long ago, e.g. 24h).

replay republishes each letter's original message to the main topic or queue of
LLMQ_BROKER with the job requeued and its attempts reset; a letter is replayed once,
replaying it again does nothing. purge deletes letters and refuses to run without a
filter (--all purges every letter).

The letters in Postgres are llmq's record. Each is also published once to <queue>.dlq (the
topic or queue of LLMQ_BROKER with ".dlq" appended) for the operator's own tools: llmq never
reads it back, and purge does not touch it. Whoever consumes it owns it; when nothing
does, drain empties the RabbitMQ queue (a Kafka topic is emptied by its retention).`,
	}
	cmd.AddCommand(newDLQLsCmd(), newDLQShowCmd(), newDLQReplayCmd(), newDLQPurgeCmd(), newDLQDrainCmd())
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
	fs.StringVar(&f.reason, "reason", "", "reason: "+dlqReasonNames())
	fs.StringVar(&f.tenant, "tenant", "", "tenant")
	fs.StringVar(&f.since, "since", "", "dead-lettered at or after: RFC 3339 time or a duration ago (24h)")
	fs.StringVar(&f.until, "until", "", "dead-lettered before: RFC 3339 time or a duration ago")
}

func (f *dlqFilterFlags) filter(now time.Time) (store.DeadLetterFilter, error) {
	out := store.DeadLetterFilter{IDs: f.ids, JobID: f.job, Reason: f.reason, Tenant: f.tenant}
	if f.reason != "" && !slices.Contains(dlq.Reasons, dlq.Reason(f.reason)) {
		return out, fmt.Errorf("--reason %q: want one of %s", f.reason, dlqReasonNames())
	}
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
	env.svc, err = dlq.NewService(dlq.Config{Store: st.DeadLetters(), Publisher: pub, Destination: cfg.Broker.Destination()})
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
	flags := config.BindFlags(cmd, config.FlagDatabase)
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
			return writeJSON(out, api.NewList(dlq.Views(recs), next))
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
	flags := config.BindFlags(cmd, config.FlagDatabase)
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
		if errors.Is(err, dlq.ErrNotFound) {
			return fmt.Errorf("no dead letter %d", id)
		}
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if asJSON {
			return writeJSON(out, dlq.NewView(r, true))
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
		row("last error", redact.Text(r.LastError, redact.ErrorMaxBytes))
		for k, v := range r.Headers {
			row("header "+k, v)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(out, "message:")
		var pretty any
		if json.Unmarshal(r.Message, &pretty) == nil {
			return writeJSON(out, pretty)
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
	flags := config.BindFlags(cmd, config.FlagDatabase|config.FlagBroker)
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
		ids, err := dlqIDs(ctx, env, filter)
		if err != nil {
			return err
		}
		replayed, skipped := 0, 0
		var errs []error
		// A letter named by id that does not exist is an error, not
		// silence.
		for _, id := range f.ids {
			if !slices.Contains(ids, id) {
				errs = append(errs, fmt.Errorf("no dead letter %d", id))
				fmt.Fprintf(out, "%d\tfailed: no such dead letter\n", id)
			}
		}
		for _, id := range ids {
			res, err := env.svc.Replay(ctx, "", id)
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("dead letter %d: %s", id, dlqFailure(err)))
				fmt.Fprintf(out, "%d\tfailed: %s\n", id, dlqFailure(err))
			case res.Replayed:
				replayed++
				fmt.Fprintf(out, "%d\treplayed\t%s\n", id, dlqDash(res.Record.JobID))
			default:
				skipped++
				fmt.Fprintf(out, "%d\talready replayed\t%s\n", id, dlqDash(res.Record.JobID))
			}
		}
		fmt.Fprintf(out, "replay: %d replayed, %d already replayed, %d failed\n", replayed, skipped, len(errs))
		if len(errs) > 0 {
			return fmt.Errorf("replay: %d failed: %w", len(errs), errors.Join(errs...))
		}
		return nil
	}
	return cmd
}

// dlqIDs lists the ids of every letter filter selects, all pages.
func dlqIDs(ctx context.Context, env *dlqEnv, filter store.DeadLetterFilter) ([]int64, error) {
	var ids []int64
	for cursor := ""; ; {
		recs, next, err := env.svc.List(ctx, store.DeadLetterListOptions{DeadLetterFilter: filter, Limit: store.ListLimitMax, After: cursor})
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			ids = append(ids, r.ID)
		}
		if next == "" {
			return ids, nil
		}
		cursor = next
	}
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
	flags := config.BindFlags(cmd, config.FlagDatabase)
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

// dlqFailure says in one phrase why a letter could not be replayed.
func dlqFailure(err error) string {
	switch {
	case errors.Is(err, dlq.ErrNotFound):
		return "no such dead letter"
	case errors.Is(err, dlq.ErrNotReplayable):
		return "its job is no longer dead-lettered"
	}
	return err.Error()
}

func dlqReasonNames() string {
	names := make([]string, len(dlq.Reasons))
	for i, r := range dlq.Reasons {
		names[i] = string(r)
	}
	return strings.Join(names, ", ")
}

func newDLQDrainCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "drain",
		Short: "Empty the RabbitMQ dead-letter queue <queue>.dlq (the letters in Postgres stay)",
		Long: `drain acknowledges and so deletes the messages waiting in <queue>.dlq, the queue every dead
letter is published to for the operator's tools, when nothing else consumes it. The letters in
Postgres (ls, show, replay, purge) are not touched. Messages published while it runs are left.
Only RabbitMQ: a Kafka dead-letter topic is emptied by its retention (retention.ms).`,
		Args: cobra.NoArgs,
	}
	flags := config.BindFlags(cmd, config.FlagBroker)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := flags.Load()
		if err != nil {
			return err
		}
		if cfg.Broker.Kind != config.BrokerAMQP {
			return fmt.Errorf("drain empties a RabbitMQ queue; %s is a %s broker: a Kafka topic is emptied by its retention", cfg.Broker, cfg.Broker.Kind)
		}
		queue := cfg.Broker.Destination() + dlq.DLQSuffix
		n, err := drainQueue(cmd.Context(), rabbitmq.Config{
			URL: cfg.Broker.AMQPURL, Queue: queue, QueueType: cfg.Broker.QueueType, MaxPriority: cfg.Broker.MaxPriority,
			Logger: slog.New(slog.DiscardHandler),
		})
		if n > 0 || err == nil {
			// With nothing removed, an error (the broker down) says it all.
			fmt.Fprintf(cmd.OutOrStdout(), "drain: %s removed from %s\n", plural(int(n), "message", "messages"), queue)
		}
		return err
	}
	return cmd
}

// drainIdle ends a drain that receives nothing for this long (another
// consumer took the rest).
const drainIdle = 5 * time.Second

// drainQueue acknowledges the messages the queue holds when it starts.
func drainQueue(ctx context.Context, cfg rabbitmq.Config) (int64, error) {
	sub, err := rabbitmq.NewSubscriber(cfg)
	if err != nil {
		return 0, err
	}
	defer sub.Close()
	want, err := sub.Depth(ctx)
	if err != nil || want == 0 {
		return 0, err
	}
	msgs, err := sub.Consume(ctx)
	if err != nil {
		return 0, err
	}
	var n int64
	idle := time.NewTimer(drainIdle)
	defer idle.Stop()
	for n < want {
		select {
		case <-ctx.Done():
			return n, interrupted(ctx)
		case <-idle.C:
			return n, nil
		case m, ok := <-msgs:
			idle.Reset(drainIdle)
			if !ok {
				return n, fmt.Errorf("drain %s: the broker closed the consumer after %d of %d messages", cfg.Queue, n, want)
			}
			if err := m.Ack(ctx); err != nil {
				return n, fmt.Errorf("drain %s: %w", cfg.Queue, err)
			}
			n++
		}
	}
	return n, nil
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

// dlqOneLine is s sanitised on one line of at most n bytes.
func dlqOneLine(s string, n int) string {
	return redact.Text(strings.Join(strings.Fields(s), " "), n)
}
