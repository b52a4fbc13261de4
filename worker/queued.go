package worker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/llmq/llmq/internal/background"
	"github.com/llmq/llmq/internal/backoff"
)

// How long the queued listener waits before it reconnects: doubling from
// queuedRetryMin to queuedRetryMax while the connection keeps failing.
const (
	queuedRetryMin = 100 * time.Millisecond
	queuedRetryMax = 10 * time.Second
)

// queuedListenerConfig configures a queuedListener.
type queuedListenerConfig struct {
	Listener QueuedListener // required
	// Listening is told each time the listener listens (again): the jobs
	// recorded while it did not were not announced. Queued is told of
	// each announced model. Both required.
	Listening func()
	Queued    func(model string)
	Clock     clockwork.Clock
	Log       *slog.Logger
}

func (c queuedListenerConfig) withDefaults() queuedListenerConfig {
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return c
}

func (c queuedListenerConfig) validate() error {
	if c.Listener == nil || c.Listening == nil || c.Queued == nil {
		return errors.New("worker: queued listener: Listener, Listening and Queued are required")
	}
	return nil
}

// queuedListener listens for jobs recorded elsewhere (Config.Queued).
type queuedListener struct {
	cfg queuedListenerConfig
}

func newQueuedListener(cfg queuedListenerConfig) (*queuedListener, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &queuedListener{cfg: cfg}, nil
}

// Run listens until ctx ends: each announced model is claimed for at
// once, and so is every model once it listens again. It reconnects when
// the connection fails; meanwhile the claim tick still claims.
func (q *queuedListener) Run(ctx context.Context) {
	background.Relisten(ctx, q.cfg.Clock, backoff.Policy{Base: queuedRetryMin, Max: queuedRetryMax},
		func(ctx context.Context, listening func()) error {
			return q.cfg.Listener.ListenJobsQueued(ctx, func() {
				listening()
				q.cfg.Listening()
			}, q.cfg.Queued)
		},
		func(err error, wait time.Duration) {
			q.cfg.Log.Warn("worker: the queued jobs' listening connection failed; reconnecting",
				slog.Any("error", err), slog.Duration("in", wait))
		})
}
