package batchapi

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/llmq/llmq/internal/background"
	"github.com/llmq/llmq/store"
)

// Service runs the Collector and the Poller every PollInterval, for
// `llmq worker` when batching is configured.
type Service struct {
	cfg       Config
	collector *Collector
	poller    *Poller
	log       *slog.Logger

	runner background.Runner
}

// New validates cfg and returns a stopped Service.
func New(cfg Config) (*Service, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(true); err != nil {
		return nil, err
	}
	m := newMetrics(cfg.Registerer)
	return &Service{cfg: cfg, collector: newCollector(cfg, m), poller: newPoller(cfg, m), log: cfg.Logger}, nil
}

// Collector returns the service's collector.
func (s *Service) Collector() *Collector { return s.collector }

// Poller returns the service's poller.
func (s *Service) Poller() *Poller { return s.poller }

// Start checks the database (one poll pass, which also republishes what a
// crash left in the outbox) and then runs in the background until Stop or
// ctx ends.
func (s *Service) Start(ctx context.Context) error {
	if _, err := s.cfg.Store.OpenBatches(ctx); err != nil {
		return fmt.Errorf("batchapi: start: %w", err)
	}
	if err := s.runner.Start(ctx, s.loop); err != nil {
		return ErrStarted
	}
	return nil
}

func (s *Service) loop(ctx context.Context) {
	t := s.cfg.Clock.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	for {
		s.pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
	}
}

// pass runs the collector then the poller once, logging failures (the
// next pass retries them).
func (s *Service) pass(ctx context.Context) {
	if _, err := s.collector.Flush(ctx); err != nil && ctx.Err() == nil {
		s.log.Error("batch collector", slog.Any("error", err))
	}
	if _, err := s.poller.Poll(ctx); err != nil && ctx.Err() == nil {
		s.log.Error("batch poller", slog.Any("error", err))
	}
}

// Stop ends the background loop and waits for the pass in progress (every
// state change it makes is transactional, so an interrupted pass is
// resumed by the next start). It may be called more than once.
func (s *Service) Stop(ctx context.Context) error {
	if err := s.runner.Stop(ctx); err != nil {
		return fmt.Errorf("batchapi: %w", err)
	}
	return nil
}

// Cancel asks the provider to cancel the batch with llmq or provider id
// ref and records its new status; the poller brings the partial results
// home and sends the other jobs back to the live lane once it is
// cancelled.
func Cancel(ctx context.Context, st Store, client *openai.Client, ref string) (*store.BatchRecord, error) {
	b, err := st.GetBatch(ctx, ref)
	if err != nil {
		return nil, err
	}
	switch {
	case b.Status == store.BatchSubmitting:
		return b, fmt.Errorf("batchapi: cancel %s: %w", b.ID, ErrNotSubmitted)
	case store.BatchTerminal(b.Status) || b.Status == store.BatchFinalizing:
		return b, fmt.Errorf("batchapi: cancel %s (%s): %w", b.ID, b.Status, ErrFinished)
	}
	resp, err := client.CancelBatch(ctx, b.ProviderBatchID)
	if err != nil {
		return b, fmt.Errorf("batchapi: cancel %s (%s): %w", b.ID, b.ProviderBatchID, providerError{err})
	}
	if err := st.UpdateBatchProgress(ctx, b.ID, progress(&resp.Batch)); err != nil {
		return b, err
	}
	return st.GetBatch(ctx, b.ID)
}

// CostReport sums what the batch lane's results cost since since (zero:
// ever) and what the same tokens would have cost live; SavingUSD is the
// difference. It is what `llmq batch show` and the bench report print.
func CostReport(ctx context.Context, st Store, since time.Time) (store.BatchCost, error) {
	c, err := st.BatchCostSummary(ctx, since)
	if err != nil {
		return c, fmt.Errorf("batchapi: cost report: %w", err)
	}
	return c, nil
}
