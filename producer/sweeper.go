package producer

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// Sweeper runs [Producer.Sweep] every Interval in the background: the
// outbox's recovery of jobs recorded but never confirmed by the broker.
type Sweeper struct {
	cfg SweeperConfig
	log *slog.Logger

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done != nil {
		return errors.New("producer: sweeper already started")
	}
	ctx, s.cancel = context.WithCancel(ctx)
	s.done = make(chan struct{})
	go s.run(ctx, s.done)
	return nil
}

func (s *Sweeper) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(s.cfg.Interval)
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
		case <-t.C:
		}
	}
}

// Stop ends the sweeps and waits for the current one (bounded by ctx). It
// may be called more than once.
func (s *Sweeper) Stop(ctx context.Context) error {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.mu.Unlock()
	if done == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
