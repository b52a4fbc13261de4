package dlq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/background"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
)

// core is what a Writer and a Service share.
type core struct {
	cfg Config
	m   *metrics
	log *slog.Logger
}

func newCore(cfg Config, writer bool) (*core, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(writer); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &core{cfg: cfg, m: m, log: cfg.Logger}, nil
}

// Writer records dead letters in Postgres, publishes them to the dead-letter
// topic or queue and raises alerts. It implements the worker's DeadLetterer.
// The row comes first, under a unique letter key; a failed publish is
// returned so the broker redelivers and the next call publishes the same
// row; [Writer.Repair] settles rows never confirmed (the ordering:
// dlq/doc.go and docs/design/queue-of-record.md). It is safe for concurrent
// use.
type Writer struct {
	*core
	repair background.Runner
}

// NewWriter checks the config and registers the metrics.
func NewWriter(cfg Config) (*Writer, error) {
	c, err := newCore(cfg, true)
	if err != nil {
		return nil, err
	}
	return &Writer{core: c}, nil
}

// DeadLetter records l, publishes it to Destination+DLQSuffix with the
// original key, body and headers plus the x-llmq-* headers, marks the job
// dead_lettered (when it exists: a poison message may have no job row) and
// notifies the Alerter, once per letter. It returns an error when the letter
// is not safely recorded and published; calling it again with the same
// letter is safe.
func (w *Writer) DeadLetter(ctx context.Context, l Letter) error {
	if l.At.IsZero() {
		l.At = w.cfg.Clock.Now()
	}
	if l.Reason == "" {
		l.Reason = ReasonUnknown
	}
	if l.Tenant == "" {
		l.Tenant = llmq.DefaultTenant
	}
	msg := l.Message
	if msg == nil {
		msg = []byte{}
	}
	d, created, err := w.cfg.Store.RecordDeadLetter(ctx, store.NewDeadLetter{
		KeyBase: l.keyBase(), JobID: l.JobID, Tenant: l.Tenant, LeaseToken: l.LeaseToken, Reason: string(l.Reason),
		LastError: l.LastError, Attempts: l.Attempts, Model: l.Model, Message: msg,
		MessageKey: l.Key, Headers: l.Headers, Source: l.Source,
		Destination: w.cfg.Destination + DLQSuffix, CreatedAt: l.At,
	})
	if err != nil {
		return fmt.Errorf("dlq: record dead letter: %w", err)
	}
	if created {
		w.m.recorded.WithLabelValues(string(l.Reason)).Inc()
	}
	return w.settle(ctx, d)
}

// settle publishes a recorded letter unless that was confirmed before (and,
// when this call confirmed it, notifies the Alerter), then marks its job
// dead_lettered.
func (w *Writer) settle(ctx context.Context, d *store.DeadLetter) error {
	if d.PublishedAt == nil {
		if err := w.publish(ctx, d.Destination, dlqMessage(d)); err != nil {
			w.m.publishFailures.Inc()
			return fmt.Errorf("dlq: publish dead letter %d to %s: %w", d.ID, d.Destination, err)
		}
		set, err := w.cfg.Store.MarkDeadLetterPublished(ctx, d.ID)
		if err != nil {
			return fmt.Errorf("dlq: %w", err)
		}
		if set {
			w.m.published.Inc()
			if w.cfg.Alerter != nil {
				w.cfg.Alerter.Notify(eventOf(d))
			}
		}
	}
	if d.JobID != "" && !Reason(d.Reason).unrecorded() {
		err := w.cfg.Store.MarkDeadLettered(ctx, store.Key{Tenant: d.Tenant, ID: d.JobID}, d.Reason, d.LastError)
		switch {
		case errors.Is(err, store.ErrNotFound):
			// No job of that id is stored.
		case errors.Is(err, store.ErrIllegalTransition):
			// Already dead-lettered (by its holder, or a redelivery),
			// finished otherwise, or held by a worker: only a queued job
			// nobody holds is ended here.
		case err != nil:
			return fmt.Errorf("dlq: dead letter %d: %w", d.ID, err)
		}
	}
	return nil
}

// publish sends msg to dest within PublishTimeout.
func (c *core) publish(ctx context.Context, dest string, msg transport.Message) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.PublishTimeout)
	defer cancel()
	return c.cfg.Publisher.Publish(ctx, dest, msg)
}

// dlqMessage is the message published to the dead-letter queue.
func dlqMessage(d *store.DeadLetter) transport.Message {
	h := make(map[string]string, len(d.Headers)+5)
	for k, v := range d.Headers {
		h[k] = v
	}
	lastErr := d.LastError
	if len(lastErr) > LastErrorHeaderMax {
		lastErr = lastErr[:LastErrorHeaderMax]
	}
	h[HeaderReason] = d.Reason
	h[HeaderAttempts] = strconv.Itoa(d.Attempts)
	h[HeaderLastError] = lastErr
	h[HeaderSource] = d.Source
	h[HeaderDeadLetterID] = strconv.FormatInt(d.ID, 10)
	return transport.Message{Key: d.MessageKey, Value: d.Message, Headers: h}
}

// RepairStats says what one Repair pass did.
type RepairStats struct {
	// Published is the letters whose DLQ publish was completed.
	Published int
	// Dropped is the letters removed because their job finished otherwise
	// (a redelivery of the message succeeded or failed for good).
	Dropped int
	// Replayed is the begun replays whose republish was completed.
	Replayed int
}

// Repair settles what a crash or a broker outage left half done: letters
// recorded more than RepairAfter ago whose DLQ publish was never confirmed
// are published (or dropped, when their job has since finished in another
// state; left alone while it is being worked on), and replays begun more than
// RepairAfter ago whose republish was never confirmed are completed. It
// handles up to RepairBatch rows of each kind and returns the errors of the
// rows it could not settle, joined.
func (w *Writer) Repair(ctx context.Context) (RepairStats, error) {
	var st RepairStats
	olderThan := w.cfg.Clock.Now().Add(-w.cfg.RepairAfter)
	letters, err := w.cfg.Store.UnpublishedDeadLetters(ctx, olderThan, w.cfg.RepairBatch)
	if err != nil {
		return st, fmt.Errorf("dlq: repair: %w", err)
	}
	var errs []error
	for _, d := range letters {
		if d.JobID != "" && !Reason(d.Reason).unrecorded() {
			job, err := w.cfg.Store.Job(ctx, d.Tenant, d.JobID)
			switch {
			case errors.Is(err, store.ErrNotFound):
			case err != nil:
				errs = append(errs, fmt.Errorf("dlq: repair dead letter %d: %w", d.ID, err))
				continue
			case !job.Status.Terminal():
				continue // a redelivery is working on it; it comes back here or finishes
			case job.Status != llmq.StatusDeadLettered:
				if _, err := w.cfg.Store.PurgeDeadLetters(ctx, store.DeadLetterFilter{IDs: []int64{d.ID}}); err != nil {
					errs = append(errs, fmt.Errorf("dlq: repair dead letter %d: %w", d.ID, err))
					continue
				}
				w.log.Info("dead letter dropped: its job finished otherwise", slog.Int64("dead_letter_id", d.ID),
					slog.String("job_id", d.JobID), slog.String("status", string(job.Status)))
				st.Dropped++
				continue
			}
		}
		if err := w.settle(ctx, d); err != nil {
			errs = append(errs, fmt.Errorf("dlq: repair: %w", err))
			continue
		}
		st.Published++
		w.m.repaired.Inc()
		w.log.Info("dead letter publish repaired", slog.Int64("dead_letter_id", d.ID), slog.String("job_id", d.JobID))
	}
	replays, err := w.cfg.Store.UnfinishedReplays(ctx, olderThan, w.cfg.RepairBatch)
	if err != nil {
		return st, errors.Join(append(errs, fmt.Errorf("dlq: repair: %w", err))...)
	}
	for _, d := range replays {
		if err := w.finishReplay(ctx, d); err != nil {
			errs = append(errs, fmt.Errorf("dlq: repair: %w", err))
			continue
		}
		st.Replayed++
		w.m.repaired.Inc()
		w.log.Info("dead letter replay repaired", slog.Int64("dead_letter_id", d.ID), slog.String("job_id", d.JobID))
	}
	return st, errors.Join(errs...)
}

// Start runs Repair every RepairInterval in the background until Stop or
// until ctx is cancelled. It fails with ErrAlreadyStarted when called twice.
func (w *Writer) Start(ctx context.Context) error {
	if err := w.repair.Start(ctx, w.repairLoop); err != nil {
		return ErrAlreadyStarted
	}
	return nil
}

func (w *Writer) repairLoop(ctx context.Context) {
	for {
		t := w.cfg.Clock.NewTimer(w.cfg.RepairInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.Chan():
		}
		st, err := w.Repair(ctx)
		if err != nil && ctx.Err() == nil {
			w.log.Warn("dead-letter repair", slog.Any("error", err))
		}
		if st != (RepairStats{}) {
			w.log.Info("dead-letter repair pass", slog.Int("published", st.Published),
				slog.Int("dropped", st.Dropped), slog.Int("replayed", st.Replayed))
		}
	}
}

// Stop ends the repair loop and waits for a pass in progress, within ctx.
// Stopping a Writer that was not started, or twice, does nothing.
func (w *Writer) Stop(ctx context.Context) error {
	if err := w.repair.Stop(ctx); err != nil {
		return fmt.Errorf("dlq: stop writer: %w", err)
	}
	return nil
}
