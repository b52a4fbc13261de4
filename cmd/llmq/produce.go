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
	"slices"
	"sort"
	"time"

	"github.com/spf13/cobra"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/app"
	"github.com/llmq/llmq/internal/backoff"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/producer"
)

func init() { register(newProduceCmd) }

// produceSummary counts what happened to the lines of the input.
type produceSummary struct {
	published, duplicates, unpublished, rejected int
	// notSent counts the jobs read but not sent when the run was
	// interrupted, lastRead the last line read then (0: not interrupted).
	notSent, lastRead int
	reasons           map[string]int
	examples          []string
}

func (s *produceSummary) reject(n int, reason, example string) {
	s.rejected += n
	s.reasons[reason] += n
	if len(s.examples) < 10 && example != "" {
		s.examples = append(s.examples, example)
	}
}

// merge adds o's counts to s.
func (s *produceSummary) merge(o *produceSummary) {
	s.published += o.published
	s.duplicates += o.duplicates
	s.unpublished += o.unpublished
	s.rejected += o.rejected
	for r, n := range o.reasons {
		s.reasons[r] += n
	}
	for _, e := range o.examples {
		if len(s.examples) < 10 {
			s.examples = append(s.examples, e)
		}
	}
}

// produceLong is llmq produce's help.
const produceLong = `produce reads one job per line (the llmq wire format; blank lines are skipped), records each
as queued in Postgres and publishes it to the broker, in batches. A line that is not a valid
job, or one that names a model the configuration does not allow (models:), is rejected with
its line number and field. When the queue is full (backpressure) produce
waits the Retry-After the queue suggests and tries again (unless --wait=false); a job whose
deadline the queue cannot meet is rejected. When the queue cannot be measured or the database
fails the insert, the batch is tried again after 1 s, 2 s, ... up to 30 s apart (within
--max-wait) rather than rejected. Exit status 1 when any job was rejected.

Ctrl-C (or SIGTERM) lets the batch being published finish, then prints the summary with the
jobs not sent and the line to resume from (--from-line), and exits 130 (143 on SIGTERM).
Resending a line is harmless when its job has an id: the same id is recorded once.

--results-to NAME names a reply queue (RabbitMQ) or results topic (Kafka) on the same broker:
every job that names no reply_to of its own is published with reply_to {"to": NAME}, and produce
subscribes to NAME and writes each new job's result event (docs/design/notifications.md) to
standard output as a JSON line as it arrives, then exits once every job it created has one
(--results-timeout bounds the wait). The summary then goes to standard error. (--wait is the
wait on a full queue, not on results.)`

func newProduceCmd() *cobra.Command {
	var (
		file          string
		batch         int
		fromLine      int
		inFlight      int
		retryBackoff  bool
		maxRetryAfter time.Duration
		resultsTo     string
		resultsWait   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "produce",
		Short: "Publish jobs from a JSONL file (or stdin) with backpressure, progress and a summary",
		Long:  produceLong,
		Args:  cobra.NoArgs,
	}
	flags := config.BindFlags(cmd, config.FlagDatabase|config.FlagBroker)
	fs := cmd.Flags()
	fs.StringVarP(&file, "file", "f", "-", "JSONL file of jobs; - reads stdin")
	fs.IntVar(&batch, "batch", 500, "jobs per publish (1-1000)")
	fs.IntVar(&fromLine, "from-line", 1, "skip the lines before this one (resume an interrupted run)")
	fs.IntVar(&inFlight, "in-flight", 4, "batches published at once (1-64; 1 publishes the lines in their order)")
	fs.BoolVar(&retryBackoff, "wait", true, "on a full queue, wait the suggested Retry-After and retry (--wait=false rejects)")
	fs.DurationVar(&maxRetryAfter, "max-wait", 10*time.Minute, "give up on a batch after waiting this long in total")
	fs.StringVar(&resultsTo, "results-to", "", "reply queue or results topic: publish the jobs with it as reply_to and write their result events as JSON lines")
	fs.DurationVar(&resultsWait, "results-timeout", time.Hour, "with --results-to, give up waiting for results after this long")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkProduceFlags(batch, fromLine, inFlight); err != nil {
			return err
		}
		cfg, err := flags.Load()
		if err != nil {
			return err
		}
		in, total, err := openJobs(cmd.InOrStdin(), file)
		if err != nil {
			return err
		}
		if f, ok := in.(*os.File); ok && file != "-" {
			defer f.Close()
		}
		ctx := cmd.Context()
		log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelError}))
		a, err := app.New(ctx, app.Config{Settings: cfg, Producer: true, Logger: log})
		if err != nil {
			return err
		}
		defer func() { _ = a.Stop(ctx) }()
		out := cmd.OutOrStdout()
		var awaited *resultsRun
		if resultsTo != "" {
			if awaited, err = startResults(ctx, cfg.Broker, resultsTo, resultsWait, cmd.OutOrStdout()); err != nil {
				return err
			}
			out = cmd.ErrOrStderr()
		}
		run := &produceRun{
			producer: a.Producer(), out: out, sum: &produceSummary{reasons: map[string]int{}}, results: awaited,
			progress: newProgress(cmd.ErrOrStderr(), total, time.Now), file: file,
			wait: retryBackoff, maxWait: maxRetryAfter, inFlight: inFlight, sent: make(chan sentBatch, inFlight),
			decode: llmq.DecodeOptions{MaxMessageBytes: cfg.MaxMessageBytes}, catalog: cfg.Catalog(),
		}
		maxLine := cmp.Or(cfg.MaxMessageBytes, llmq.MaxMessageBytesDefault) + 1
		if cfg.MaxMessageBytes < 0 {
			maxLine = 1 << 30
		}
		err = run.run(ctx, in, maxLine, batch, fromLine)
		if awaited != nil {
			err = errors.Join(err, awaited.wait())
		}
		return err
	}
	return cmd
}

// openJobs opens the jobs file ("-": stdin) and counts its lines (-1 for
// stdin) for the progress.
func openJobs(stdin io.Reader, file string) (io.Reader, int64, error) {
	if file == "-" {
		return stdin, -1, nil
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, 0, err
	}
	total, err := countLines(f)
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, total, nil
}

// checkProduceFlags checks the ranges of --batch, --from-line and --in-flight.
func checkProduceFlags(batch, fromLine, inFlight int) error {
	if batch < 1 || batch > producer.MaxBatchDefault {
		return fmt.Errorf("--batch must be 1-%d", producer.MaxBatchDefault)
	}
	if fromLine < 1 {
		return fmt.Errorf("--from-line must be 1 or more")
	}
	if inFlight < 1 || inFlight > 64 {
		return fmt.Errorf("--in-flight must be 1-64")
	}
	return nil
}

// produceRun is one `llmq produce`: the lines read, the batch being
// filled and the counts of what became of each line.
type produceRun struct {
	producer *producer.Producer
	out      io.Writer
	sum      *produceSummary
	progress *progress
	file     string
	wait     bool
	maxWait  time.Duration
	decode   llmq.DecodeOptions
	// catalog refuses the jobs that name a model the configuration does
	// not allow.
	catalog llmq.Catalog
	// results, when set, awaits the result events of the jobs created
	// (--results-to).
	results *resultsRun

	pending []*llmq.Job
	lines   []int // the line of each pending job

	// inFlight is the most batches being published at once; sent
	// receives each one's outcome, busy counts those not yet received.
	inFlight int
	sent     chan sentBatch
	busy     int
	// unsent are the lines of the jobs not sent (a batch whose wait for
	// room an interrupt ended).
	unsent []int
}

// sentBatch is what became of one batch published beside the reading.
type sentBatch struct {
	sum   *produceSummary
	lines []int // the lines of the jobs not sent
	err   error
}

// line is one line of the input, or the error that ended the reading.
type line struct {
	n    int
	data []byte
	err  error
}

// readLines sends the lines of in (copies) until its end, an error, or
// stop is closed. It runs beside the publishing so that an interrupt is
// seen while a read (stdin) blocks.
func readLines(in io.Reader, maxLine int, out chan<- line, stop <-chan struct{}) {
	defer close(out)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for n := 1; ; n++ {
		l := line{n: n}
		if sc.Scan() {
			l.data = bytes.Clone(sc.Bytes())
		} else if l.err = sc.Err(); l.err == nil {
			return
		}
		select {
		case out <- l:
		case <-stop:
			return
		}
		if l.err != nil {
			return
		}
	}
}

func (r *produceRun) run(ctx context.Context, in io.Reader, maxLine, batch, fromLine int) error {
	lines := make(chan line)
	stop := make(chan struct{})
	defer close(stop)
	go readLines(in, maxLine, lines, stop)
	read := 0
	for {
		select {
		case <-ctx.Done():
			return r.interrupted(ctx, read)
		case l, ok := <-lines:
			if !ok {
				if err := errors.Join(r.flush(ctx), r.settle()); err != nil {
					return r.interrupted(ctx, read)
				}
				r.progress.done()
				printProduceSummary(r.out, r.sum)
				if r.sum.rejected > 0 {
					return fmt.Errorf("%s rejected", plural(r.sum.rejected, "job", "jobs"))
				}
				return nil
			}
			if l.err != nil {
				return fmt.Errorf("read line %d: %w", l.n, l.err)
			}
			read = l.n
			if l.n < fromLine {
				continue
			}
			r.add(l)
			if len(r.pending) == batch {
				if err := r.flush(ctx); err != nil {
					return r.interrupted(ctx, read)
				}
			}
			r.progress.update(read, r.sum)
		}
	}
}

// add decodes a line into the batch, or counts it rejected.
func (r *produceRun) add(l line) {
	data := bytes.TrimSpace(l.data)
	if len(data) == 0 {
		return
	}
	j, err := llmq.Decode(data, r.decode)
	if err == nil {
		if errs := r.catalog.CheckModels(j); len(errs) > 0 {
			err = &llmq.ValidationError{Errors: errs}
		}
	}
	if err != nil {
		var ve *llmq.ValidationError
		reason := "invalid job"
		if errors.As(err, &ve) && len(ve.Errors) > 0 {
			reason = "invalid " + cmp.Or(ve.Errors[0].Field, "message") + " (" + ve.Errors[0].Code + ")"
		}
		r.sum.reject(1, reason, fmt.Sprintf("line %d: %v", l.n, err))
		return
	}
	if r.results != nil && j.ReplyTo.Empty() {
		j.ReplyTo = &llmq.Reply{To: r.results.dest}
	}
	r.pending, r.lines = append(r.pending, j), append(r.lines, l.n)
}

// flush hands the batch to a goroutine that publishes it, after waiting
// for one of the batches in flight when there are inFlight of them. It
// returns an error only when ctx ended while a batch waited for room.
func (r *produceRun) flush(ctx context.Context) error {
	if len(r.pending) == 0 {
		return nil
	}
	if r.busy == r.inFlight {
		if err := r.receive(); err != nil {
			return err
		}
	}
	jobs, lines := r.pending, r.lines
	r.pending, r.lines = nil, nil
	r.busy++
	go func() {
		sum := &produceSummary{reasons: map[string]int{}}
		_, unsent, err := publishLines(ctx, r.producer, jobs, lines, sum, r.wait, r.maxWait, r.results.created)
		r.sent <- sentBatch{sum: sum, lines: unsent, err: err}
	}()
	return nil
}

// receive counts the outcome of the next batch in flight to end.
func (r *produceRun) receive() error {
	b := <-r.sent
	r.busy--
	r.sum.merge(b.sum)
	r.unsent = append(r.unsent, b.lines...)
	return b.err
}

// settle waits for every batch in flight and returns the first error.
func (r *produceRun) settle() error {
	var first error
	for r.busy > 0 {
		if err := r.receive(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// interrupted prints the summary of an interrupted run with what was not
// sent and where to resume, and returns the interrupted error (exit 130).
func (r *produceRun) interrupted(ctx context.Context, read int) error {
	_ = r.settle() // the publishes under way finish; a wait for room ends
	r.progress.done()
	unsent := append(r.unsent, r.lines...)
	resume := read + 1
	if len(unsent) > 0 {
		resume = slices.Min(unsent)
	}
	r.sum.notSent, r.sum.lastRead = len(unsent), read
	printProduceSummary(r.out, r.sum)
	hint := fmt.Sprintf("llmq produce --file %s --from-line %d", shellWord(r.file), resume)
	if r.file == "-" {
		hint = fmt.Sprintf("send the same input to llmq produce --from-line %d", resume)
	}
	fmt.Fprintf(r.out, "interrupted: resume from line %d: %s\n", resume, hint)
	return interrupted(ctx)
}

// publishTimeout bounds the publish of one batch, which an interrupt lets
// finish so that every line is either sent or not.
const publishTimeout = time.Minute

// publishLines publishes one batch, waiting out backpressure when asked,
// and counts what became of each job. A publish in progress finishes
// whatever ctx does; a wait for room ends with ctx, and then the jobs not
// sent and their lines are returned with ctx's error.
func publishLines(ctx context.Context, p *producer.Producer, jobs []*llmq.Job, lines []int, sum *produceSummary,
	wait bool, maxWait time.Duration, created func(producer.Receipt)) ([]*llmq.Job, []int, error) {
	var waited time.Duration
	transientFails := 0
	for {
		pause := transientBackoff.Exp(transientFails)
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
		rs, _, err := p.PublishBatch(pctx, jobs)
		cancel()
		var bp *producer.ErrBackpressure
		switch {
		case err == nil || errors.Is(err, producer.ErrUnpublished):
			for _, r := range rs {
				if r.Created && created != nil {
					created(r)
				}
				switch {
				case !r.Created:
					sum.duplicates++
				case r.Published:
					sum.published++
				default:
					sum.unpublished++
				}
			}
			return nil, nil, nil
		case errors.As(err, &bp) && bp.Reason == producer.ReasonDeadline:
			// Drop the job that cannot make its deadline and retry the rest.
			sum.reject(1, "deadline unreachable", fmt.Sprintf("line %d: %v", lines[bp.Index], err))
			jobs = append(jobs[:bp.Index:bp.Index], jobs[bp.Index+1:]...)
			lines = append(lines[:bp.Index:bp.Index], lines[bp.Index+1:]...)
			if len(jobs) == 0 {
				return nil, nil, nil
			}
		case errors.As(err, &bp) && wait && waited+bp.RetryAfter <= maxWait:
			waited += bp.RetryAfter
			t := time.NewTimer(bp.RetryAfter)
			select {
			case <-ctx.Done():
				t.Stop()
				return jobs, lines, context.Cause(ctx)
			case <-t.C:
			}
		case errors.As(err, &bp):
			sum.reject(len(jobs), "queue full", fmt.Sprintf("lines %d-%d: %v", lines[0], lines[len(lines)-1], err))
			return nil, nil, nil
		case wait && transient(err) && waited+pause <= maxWait:
			// The queue could not be measured (a probe over its timeout
			// under load) or the insert failed: nothing was recorded, and
			// the same jobs (their ids set) are sent again.
			waited += pause
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return jobs, lines, context.Cause(ctx)
			case <-t.C:
			}
			transientFails++
		default:
			sum.reject(len(jobs), "error: "+err.Error(), fmt.Sprintf("lines %d-%d", lines[0], lines[len(lines)-1]))
			return nil, nil, nil
		}
	}
}

// transientBackoff is the wait between two tries of a batch that failed
// for a reason that passes (transient): 1s doubling up to 30s.
var transientBackoff = backoff.Policy{Base: time.Second, Max: 30 * time.Second}

// transient reports a PublishBatch error after which nothing was recorded
// and a later try may succeed: the queue could not be measured, or the
// database refused the insert for a reason other than the data.
func transient(err error) bool {
	return errors.Is(err, producer.ErrDatabaseUnavailable) || errors.Is(err, producer.ErrBrokerUnavailable)
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
	if s.lastRead > 0 {
		fmt.Fprintf(w, "not sent (interrupted): %s read, and every line after line %d, not read\n",
			plural(s.notSent, "job", "jobs"), s.lastRead)
	}
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
