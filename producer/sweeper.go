package producer

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/llmq/llmq/internal/background"
)

// Sweeper runs [Producer.Sweep] every Interval in the background: the
// outbox's recovery of jobs recorded but never confirmed by the broker.
type Sweeper struct {
	cfg SweeperConfig
	log *slog.Logger

	runner background.Runner
}

// NewSweeper returns a Sweeper; Start runs it.
func NewSweeper(cfg SweeperConfig) (*Sweeper, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Sweeper{cfg: cfg, log: cfg.Producer.log}, nil
}

// Start sweeps once at once, then every Interval, until Stop or ctx ends.
func (s *Sweeper) Start(ctx context.Context) error {
	if err := s.runner.Start(ctx, s.run); err != nil {
		return fmt.Errorf("producer: sweeper: %w", err)
	}
	return nil
}

func (s *Sweeper) run(ctx context.Context) {
	t := s.cfg.Producer.cfg.Clock.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		n, err := s.cfg.Producer.Sweep(ctx, s.cfg.Grace, s.cfg.Limit)
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Warn("outbox sweep failed", slog.Int("republished", n), slog.String("error", err.Error()))
		case n > 0:
			s.log.Info("outbox sweep republished jobs", slog.Int("republished", n))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
	}
}

// Stop ends the sweeps and waits for the current one (bounded by ctx). It
// may be called more than once.
func (s *Sweeper) Stop(ctx context.Context) error {
	if err := s.runner.Stop(ctx); err != nil {
		return fmt.Errorf("producer: sweeper: %w", err)
	}
	return nil
}
