package dlq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
)

// Service reads, replays and purges dead letters, for `llmq dlq` and the
// HTTP API. It is safe for concurrent use.
type Service struct {
	*core
}

// NewService checks the config and registers the metrics. Publisher and
// Destination are only needed by Replay.
func NewService(cfg Config) (*Service, error) {
	c, err := newCore(cfg, false)
	if err != nil {
		return nil, err
	}
	return &Service{core: c}, nil
}

// ErrBadCursor is returned for a cursor that List did not produce.
var ErrBadCursor = store.ErrBadCursor

// List returns one page of letters, newest first, and the cursor of the next
// page ("" after the last). q.Limit 0 means 100, at most 1000; q.After is
// the cursor of the previous page.
func (s *Service) List(ctx context.Context, q store.DeadLetterListOptions) ([]*store.DeadLetter, string, error) {
	recs, next, err := s.cfg.Store.ListDeadLetters(ctx, q)
	if err != nil {
		return nil, "", fmt.Errorf("dlq: list: %w", err)
	}
	return recs, next, nil
}

// Count counts the letters of tenant ("" = every tenant) dead-lettered in
// [since, until) (zero: unbounded) by reason; a reason without letters is
// absent.
func (s *Service) Count(ctx context.Context, tenant string, since, until time.Time) ([]store.DeadLetterCount, error) {
	counts, err := s.cfg.Store.CountDeadLetters(ctx, tenant, since, until)
	if err != nil {
		return nil, fmt.Errorf("dlq: count: %w", err)
	}
	return counts, nil
}

// Get returns letter id of tenant ("" = any tenant); ErrNotFound when there
// is none.
func (s *Service) Get(ctx context.Context, tenant string, id int64) (*store.DeadLetter, error) {
	d, err := s.cfg.Store.GetDeadLetter(ctx, tenant, id)
	if err != nil {
		return nil, notFound(err)
	}
	return d, nil
}

func notFound(err error) error {
	if errors.Is(err, store.ErrDeadLetterNotFound) {
		return fmt.Errorf("dlq: %w: %w", ErrNotFound, err)
	}
	return fmt.Errorf("dlq: %w", err)
}

// Purge deletes the letters f selects and returns how many. A filter that
// selects nothing explicitly (no field set, All false) is refused with
// ErrEmptyFilter. Purging a letter does not touch its job.
func (s *Service) Purge(ctx context.Context, f store.DeadLetterFilter) (int64, error) {
	n, err := s.cfg.Store.PurgeDeadLetters(ctx, f)
	if errors.Is(err, store.ErrEmptyFilter) {
		return 0, ErrEmptyFilter
	}
	if err != nil {
		return 0, fmt.Errorf("dlq: purge: %w", err)
	}
	return n, nil
}

// ReplayResult is the outcome of a Replay.
type ReplayResult struct {
	// Record is the letter after the call.
	Record *store.DeadLetter
	// Replayed is true for the one call that replayed the letter; false
	// when it had been replayed before (nothing was published).
	Replayed bool
}

// Replay requeues the job of letter id of tenant ("" = any tenant) with its
// attempts reset and republishes its original message, once: a second
// replay publishes nothing and returns Replayed=false. The order (begin in
// Postgres, requeue, publish; Writer.Repair finishes a failed publish) is
// in the package documentation (dlq/doc.go, Replay). Errors: ErrNotFound,
// ErrNotReplayable (the job is not dead-lettered), ErrNoPublisher.
func (s *Service) Replay(ctx context.Context, tenant string, id int64) (ReplayResult, error) {
	if s.cfg.Publisher == nil {
		return ReplayResult{}, fmt.Errorf("dlq: replay %d: %w", id, ErrNoPublisher)
	}
	d, err := s.cfg.Store.GetDeadLetter(ctx, tenant, id)
	if err != nil {
		return ReplayResult{}, notFound(err)
	}
	if d.ReplayedAt != nil {
		return ReplayResult{Record: d}, nil
	}
	if d.JobID != "" {
		job, err := s.cfg.Store.Job(ctx, d.Tenant, d.JobID)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return ReplayResult{}, fmt.Errorf("dlq: replay %d: %w", id, err)
		case job.Status != llmq.StatusDeadLettered:
			// A concurrent replay begins (replayed_at) before it requeues
			// the job: if one did, this call is the repeated replay.
			if again, err := s.cfg.Store.GetDeadLetter(ctx, tenant, id); err == nil && again.ReplayedAt != nil {
				return ReplayResult{Record: again}, nil
			}
			return ReplayResult{}, fmt.Errorf("dlq: replay %d: job %q is %s: %w", id, d.JobID, job.Status, ErrNotReplayable)
		}
	}
	d, begun, err := s.cfg.Store.BeginReplay(ctx, tenant, id)
	if err != nil {
		return ReplayResult{}, notFound(err)
	}
	if !begun {
		return ReplayResult{Record: d}, nil
	}
	s.m.replays.Inc()
	if err := s.finishReplay(ctx, d); err != nil {
		return ReplayResult{Record: d}, err
	}
	s.log.Info("dead letter replayed", slog.Int64("dead_letter_id", d.ID), slog.String("job_id", d.JobID),
		slog.String("tenant", d.Tenant))
	d, err = s.cfg.Store.GetDeadLetter(ctx, "", id)
	if err != nil {
		return ReplayResult{}, notFound(err)
	}
	return ReplayResult{Record: d, Replayed: true}, nil
}

// finishReplay requeues the letter's job (when it has one), publishes the
// original message to the main destination and marks the replay published.
// It is safe to run again on a replay that did not finish.
func (c *core) finishReplay(ctx context.Context, d *store.DeadLetter) error {
	if c.cfg.Publisher == nil {
		return fmt.Errorf("dlq: replay %d: %w", d.ID, ErrNoPublisher)
	}
	if d.JobID != "" {
		_, err := c.cfg.Store.Requeue(ctx, d.Tenant, d.JobID)
		var ite *store.IllegalTransitionError
		switch {
		case err == nil, errors.Is(err, store.ErrNotFound):
		case errors.As(err, &ite):
			// The job left dead_lettered by other means (its message came
			// back): it is live again, there is nothing to republish.
			c.log.Warn("replay skipped: the job is no longer dead-lettered", slog.Int64("dead_letter_id", d.ID),
				slog.String("job_id", d.JobID), slog.String("status", string(ite.From)))
			if _, err := c.cfg.Store.MarkReplayPublished(ctx, d.ID); err != nil {
				return fmt.Errorf("dlq: replay %d: %w", d.ID, err)
			}
			return nil
		default:
			return fmt.Errorf("dlq: replay %d: %w", d.ID, err)
		}
	}
	dest := c.mainDestination(d)
	if dest == "" {
		return fmt.Errorf("dlq: replay %d: %w", d.ID, configError("Destination", "required to replay a letter without a destination"))
	}
	h := make(map[string]string, len(d.Headers)+1)
	for k, v := range d.Headers {
		h[k] = v
	}
	h[HeaderReplayOf] = strconv.FormatInt(d.ID, 10)
	msg := transport.Message{Key: d.MessageKey, Value: d.Message, Headers: h, Priority: priorityOf(d.Message)}
	if err := c.publish(ctx, dest, msg); err != nil {
		c.m.publishFailures.Inc()
		return fmt.Errorf("dlq: replay %d: publish to %s: %w", d.ID, dest, err)
	}
	if _, err := c.cfg.Store.MarkReplayPublished(ctx, d.ID); err != nil {
		return fmt.Errorf("dlq: replay %d: %w", d.ID, err)
	}
	return nil
}

// mainDestination is where a replay goes: the letter's DLQ destination
// without DLQSuffix, or Destination.
func (c *core) mainDestination(d *store.DeadLetter) string {
	if main, ok := strings.CutSuffix(d.Destination, DLQSuffix); ok && main != "" {
		return main
	}
	return c.cfg.Destination
}

// priorityOf maps the job's priority to the broker priority the producer
// uses (high 9, normal 5, low 1); 0 for a message that does not decode.
func priorityOf(msg []byte) uint8 {
	j, err := llmq.Decode(msg, llmq.DecodeOptions{})
	if err != nil {
		return 0
	}
	switch j.Priority {
	case llmq.PriorityHigh:
		return 9
	case llmq.PriorityLow:
		return 1
	}
	return 5
}
