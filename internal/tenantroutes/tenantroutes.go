package tenantroutes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/background"
	"github.com/llmq/llmq/internal/backoff"
	"github.com/llmq/llmq/store"
)

// Defaults of Config.
const (
	PeriodDefault      = 30 * time.Second
	ListenRetryDefault = time.Second
	listenRetryMax     = 30 * time.Second
)

// Source is where Routes read the rows: a *store.TenantNotifications.
type Source interface {
	List(ctx context.Context) ([]store.TenantNotification, error)
	Listen(ctx context.Context, listening, changed func()) error
}

// Config configures Routes.
type Config struct {
	// Source holds the rows. Required.
	Source Source
	// OnSecrets, when set, takes every load's webhook secrets by tenant
	// (the webhook sender's SetSecrets); an error keeps the snapshot
	// served before and is logged.
	OnSecrets func(map[string][]string) error
	// Period is the reload that backs up the notifications (default
	// PeriodDefault).
	Period time.Duration
	// Clock and Log: the real clock and slog.Default() when nil.
	Clock clockwork.Clock
	Log   *slog.Logger
}

// Routes serve the newest tenant routes they could load. Safe for
// concurrent use; the zero value is not usable (New).
type Routes struct {
	cfg  Config
	cur  atomic.Pointer[map[string]llmq.Reply]
	kick chan struct{}
	run  background.Runner
}

// New returns Routes serving no tenant route until Start loads them.
func New(cfg Config) (*Routes, error) {
	if cfg.Source == nil {
		return nil, errors.New("tenantroutes: Source is required")
	}
	if cfg.Period < 0 {
		return nil, fmt.Errorf("tenantroutes: Period must not be negative, got %s", cfg.Period)
	}
	cfg.Period = cmp.Or(cfg.Period, PeriodDefault)
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	r := &Routes{cfg: cfg, kick: make(chan struct{}, 1)}
	r.cur.Store(&map[string]llmq.Reply{})
	return r, nil
}

// TenantReply is tenant's route for its jobs that name none, when it has
// one (the worker's TenantReplies).
func (r *Routes) TenantReply(tenant string) (llmq.Reply, bool) {
	rep, ok := (*r.cur.Load())[tenant]
	return rep, ok
}

// Load reads the rows once and serves them; on an error the routes and
// secrets served stay.
func (r *Routes) Load(ctx context.Context) error {
	rows, err := r.cfg.Source.List(ctx)
	if err != nil {
		return fmt.Errorf("tenantroutes: load: %w", err)
	}
	routes := make(map[string]llmq.Reply, len(rows))
	secrets := make(map[string][]string, len(rows))
	for _, row := range rows {
		if rep := row.Reply(); !rep.Empty() && row.Tenant != store.AnyTenantNotifications {
			routes[row.Tenant] = rep
		}
		if len(row.Secrets) > 0 {
			secrets[row.Tenant] = row.Secrets
		}
	}
	if r.cfg.OnSecrets != nil {
		if err := r.cfg.OnSecrets(secrets); err != nil {
			return fmt.Errorf("tenantroutes: load: %w", err)
		}
	}
	r.cur.Store(&routes)
	return nil
}

// Start loads the rows (failing fast when it cannot), then reloads them
// in the background at every change and every Period until Stop.
func (r *Routes) Start(ctx context.Context) error {
	if err := r.Load(ctx); err != nil {
		return err
	}
	return r.run.Start(ctx, r.loop)
}

// Stop ends the reloads. It may be called more than once.
func (r *Routes) Stop(ctx context.Context) error { return r.run.Stop(ctx) }

func (r *Routes) loop(ctx context.Context) {
	listened := make(chan struct{})
	go func() {
		defer close(listened)
		background.Relisten(ctx, r.cfg.Clock, backoff.Policy{Base: ListenRetryDefault, Max: listenRetryMax},
			func(ctx context.Context, listening func()) error {
				return r.cfg.Source.Listen(ctx, func() { listening(); r.wake() }, r.wake)
			},
			func(err error, wait time.Duration) {
				r.cfg.Log.Warn("tenantroutes: listening failed", slog.Any("error", err), slog.Duration("retry_in", wait))
			})
	}()
	defer func() { <-listened }()
	tick := r.cfg.Clock.NewTicker(r.cfg.Period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-tick.Chan():
		}
		if err := r.Load(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Log.Warn("tenantroutes: reload failed: serving the last good routes", slog.Any("error", err))
		}
	}
}

// wake asks the loop for a reload (one pending is enough).
func (r *Routes) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}
