package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/app"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/producer"
)

func init() { register(newProduceCmd) }

// produceSummary counts what happened to the lines of the input.
type produceSummary struct {
	published, duplicates, unpublished, rejected int
	reasons                                      map[string]int
	examples                                     []string
}

func (s *produceSummary) reject(n int, reason, example string) {
	s.rejected += n
	s.reasons[reason] += n
	if len(s.examples) < 10 && example != "" {
		s.examples = append(s.examples, example)
	}
}

func newProduceCmd() *cobra.Command {
	var (
		file          string
		batch         int
		retryBackoff  bool
		maxRetryAfter time.Duration
	)
	cmd := &cobra.Command{
		Use:   "produce",
		Short: "Publish jobs from a JSONL file (or stdin) with backpressure, a progress bar and a summary",
		Long: `produce reads one job per line (the llmq wire format; blank lines are skipped), records each
as queued in Postgres and publishes it to the broker, in batches. A line that is not a valid
job is rejected with its line number and field. When the queue is full (backpressure) produce
waits the Retry-After the queue suggests and tries again (unless --no-wait); a job whose
deadline the queue cannot meet is rejected. Exit status 1 when any job was rejected.`,
		Args: cobra.NoArgs,
	}
	flags := config.BindFlags(cmd, config.FlagDatabase|config.FlagBroker)
	fs := cmd.Flags()
	fs.StringVarP(&file, "file", "f", "-", "JSONL file of jobs; - reads stdin")
	fs.IntVar(&batch, "batch", 100, "jobs per publish (1-1000)")
	fs.BoolVar(&retryBackoff, "wait", true, "on a full queue, wait the suggested Retry-After and retry (--wait=false rejects)")
	fs.DurationVar(&maxRetryAfter, "max-wait", 10*time.Minute, "give up on a batch after waiting this long in total")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if batch < 1 || batch > producer.MaxBatchDefault {
			return fmt.Errorf("--batch must be 1-%d", producer.MaxBatchDefault)
		}
		cfg, err := flags.Load()
		if err != nil {
			return err
		}
		var in io.Reader = cmd.InOrStdin()
		total := int64(-1)
		if file != "-" {
			f, err := os.Open(file)
			if err != nil {
				return err
			}
			defer f.Close()
			if total, err = countLines(f); err != nil {
				return err
			}
			in = f
		}
		ctx := cmd.Context()
		log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelError}))
		a, err := app.New(ctx, app.Config{Settings: cfg, Producer: true, Logger: log})
		if err != nil {
			return err
		}
		defer func() { _ = a.Stop(ctx) }()
		bar := progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(cmd.ErrOrStderr()), progressbar.OptionSetDescription("publishing"),
			progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("jobs"),
			progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionOnCompletion(func() {
				fmt.Fprintln(cmd.ErrOrStderr())
			}))
		sum := &produceSummary{reasons: map[string]int{}}
		pending := make([]*llmq.Job, 0, batch)
		lines := make([]int, 0, batch)
		flush := func() error {
			if len(pending) == 0 {
				return nil
			}
			err := publishLines(ctx, a.Producer(), pending, lines, sum, retryBackoff, maxRetryAfter)
			_ = bar.Add(len(pending))
			pending, lines = pending[:0], lines[:0]
			return err
		}
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64<<10), cmp.Or(cfg.MaxMessageBytes, llmq.MaxMessageBytesDefault)+1)
		if cfg.MaxMessageBytes < 0 {
			sc.Buffer(make([]byte, 64<<10), 1<<30)
		}
		n := 0
		for sc.Scan() {
			n++
			line := bytes.TrimSpace(sc.Bytes())
			if len(line) == 0 {
				_ = bar.Add(1)
				continue
			}
			j, err := llmq.Decode(line, llmq.DecodeOptions{MaxMessageBytes: cfg.MaxMessageBytes})
			if err != nil {
				var ve *llmq.ValidationError
				reason := "invalid job"
				if errors.As(err, &ve) && len(ve.Errors) > 0 {
					reason = "invalid " + cmp.Or(ve.Errors[0].Field, "message") + " (" + ve.Errors[0].Code + ")"
				}
				sum.reject(1, reason, fmt.Sprintf("line %d: %v", n, err))
				_ = bar.Add(1)
				continue
			}
			pending, lines = append(pending, j), append(lines, n)
			if len(pending) == batch {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("read line %d: %w", n+1, err)
		}
		if err := flush(); err != nil {
			return err
		}
		_ = bar.Finish()
		printProduceSummary(cmd.OutOrStdout(), sum)
		if sum.rejected > 0 {
			return fmt.Errorf("%d jobs rejected", sum.rejected)
		}
		return nil
	}
	return cmd
}

// publishLines publishes one batch, waiting out backpressure when asked.
// Only an interrupted run is an error; refused jobs are counted.
func publishLines(ctx context.Context, p *producer.Producer, jobs []*llmq.Job, lines []int, sum *produceSummary,
	wait bool, maxWait time.Duration) error {
	waited := time.Duration(0)
	for {
		rs, _, err := p.PublishBatch(ctx, jobs)
		var bp *producer.ErrBackpressure
		switch {
		case err == nil || errors.Is(err, producer.ErrUnpublished):
			for i, r := range rs {
				switch {
				case r.Conflict:
					sum.reject(1, "id taken by another tenant", fmt.Sprintf("line %d: id %q", lines[i], r.ID))
				case !r.Created:
					sum.duplicates++
				case r.Published:
					sum.published++
				default:
					sum.unpublished++
				}
			}
			return nil
		case errors.As(err, &bp) && bp.Reason == producer.ReasonDeadline:
			// Drop the job that cannot make its deadline and retry the rest.
			sum.reject(1, "deadline unreachable", fmt.Sprintf("line %d: %v", lines[bp.Index], err))
			jobs = append(jobs[:bp.Index:bp.Index], jobs[bp.Index+1:]...)
			lines = append(lines[:bp.Index:bp.Index], lines[bp.Index+1:]...)
			if len(jobs) == 0 {
				return nil
			}
		case errors.As(err, &bp) && wait && waited+bp.RetryAfter <= maxWait:
			waited += bp.RetryAfter
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(bp.RetryAfter):
			}
		case errors.As(err, &bp):
			sum.reject(len(jobs), "queue full", fmt.Sprintf("lines %d-%d: %v", lines[0], lines[len(lines)-1], err))
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			sum.reject(len(jobs), "error: "+err.Error(), fmt.Sprintf("lines %d-%d", lines[0], lines[len(lines)-1]))
			return nil
		}
	}
}

func printProduceSummary(w io.Writer, s *produceSummary) {
	fmt.Fprintf(w, "published: %d\n", s.published)
	if s.unpublished > 0 {
		fmt.Fprintf(w, "recorded, not yet published (the outbox sweeper of llmq api publishes them): %d\n", s.unpublished)
	}
	if s.duplicates > 0 {
		fmt.Fprintf(w, "already present (same id, unchanged): %d\n", s.duplicates)
	}
	fmt.Fprintf(w, "rejected: %d\n", s.rejected)
	reasons := make([]string, 0, len(s.reasons))
	for r := range s.reasons {
		reasons = append(reasons, r)
	}
	sort.Slice(reasons, func(i, j int) bool { return s.reasons[reasons[i]] > s.reasons[reasons[j]] })
	for _, r := range reasons {
		fmt.Fprintf(w, "  %6d  %s\n", s.reasons[r], r)
	}
	for _, e := range s.examples {
		fmt.Fprintf(w, "  %s\n", e)
	}
}

// countLines counts the lines of f and rewinds it.
func countLines(f *os.File) (int64, error) {
	var n int64
	buf := make([]byte, 256<<10)
	last := byte('\n')
	for {
		k, err := f.Read(buf)
		n += int64(bytes.Count(buf[:k], []byte{'\n'}))
		if k > 0 {
			last = buf[k-1]
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	if last != '\n' {
		n++
	}
	_, err := f.Seek(0, io.SeekStart)
	return n, err
}
