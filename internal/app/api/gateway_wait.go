package api

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/llmq/llmq/internal/background"
	"github.com/llmq/llmq/internal/backoff"
	"github.com/llmq/llmq/store"
)

// Reconnection delays of the listening connection.
const (
	listenRetryMin = 100 * time.Millisecond
	listenRetryMax = 10 * time.Second
)

// waiters fans the job-done notifications of the one listening connection
// out to the callers waiting in this process. A wake-up only says "read
// the job again": it is sent on a channel of one slot, never blocks, and a
// caller that was already woken loses nothing. It is safe for concurrent
// use.
type waiters struct {
	mu    sync.Mutex
	byKey map[store.Key][]chan struct{}
}

// subscribe registers a waiter for k; stop removes it.
func (ws *waiters) subscribe(k store.Key) (wake <-chan struct{}, stop func()) {
	ch := make(chan struct{}, 1)
	ws.mu.Lock()
	if ws.byKey == nil {
		ws.byKey = map[store.Key][]chan struct{}{}
	}
	ws.byKey[k] = append(ws.byKey[k], ch)
	ws.mu.Unlock()
	return ch, func() {
		ws.mu.Lock()
		defer ws.mu.Unlock()
		chs := slices.DeleteFunc(ws.byKey[k], func(c chan struct{}) bool { return c == ch })
		if len(chs) == 0 {
			delete(ws.byKey, k)
		} else {
			ws.byKey[k] = chs
		}
	}
}

// notify wakes the waiters of k.
func (ws *waiters) notify(k store.Key) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, ch := range ws.byKey[k] {
		wake(ch)
	}
}

// wakeAll wakes every waiter: the listening connection (re)started, and
// what ended while it was down was not heard.
func (ws *waiters) wakeAll() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, chs := range ws.byKey {
		for _, ch := range chs {
			wake(ch)
		}
	}
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// waitDone returns job k once it is terminal, or ctx's error. It
// subscribes before it reads the job, so an end announced between the
// read and the wait is not lost; it reads again at each wake-up. A read
// that fails (the database is away) waits for the next wake-up: the
// listening connection fails too, and its return wakes everyone.
func (a *gateway) waitDone(ctx context.Context, k store.Key) (*store.JobRecord, error) {
	wake, stop := a.waiters.subscribe(k)
	defer stop()
	a.waiting.Inc()
	defer a.waiting.Dec()
	for {
		rec, err := a.cfg.Store.Get(ctx, k.Tenant, k.ID)
		switch {
		case err == nil && rec.Status.Terminal():
			return rec, nil
		case err != nil && ctx.Err() == nil:
			a.log.Warn("api: gateway: read the job", slog.String("key", k.String()), slog.String("error", err.Error()))
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Start runs the gateway's listening connection (nothing without
// Config.JobsDone): one connection for the whole process, reconnected with
// backoff when it fails; and, with Config.Limits, the exchange of the
// door's limits with the other replicas (doorshare.go).
func (a *API) Start(ctx context.Context) error {
	if a.cfg.Limits != nil {
		if err := a.limitSharer.Start(ctx, a.shareLimits); err != nil {
			return err
		}
	}
	if a.cfg.JobsDone == nil {
		return nil
	}
	return a.listener.Start(ctx, a.listenAll)
}

// Stop closes the listening connection and ends the limits' exchange. It
// may be called more than once.
func (a *API) Stop(ctx context.Context) error {
	return errors.Join(a.listener.Stop(ctx), a.limitSharer.Stop(ctx))
}

func (a *gateway) listen(ctx context.Context) {
	background.Relisten(ctx, a.cfg.Clock, backoff.Policy{Base: listenRetryMin, Max: listenRetryMax},
		func(ctx context.Context, listening func()) error {
			return a.cfg.JobsDone.ListenJobsDone(ctx, func() {
				listening()
				a.waiters.wakeAll()
			}, a.waiters.notify)
		},
		func(err error, wait time.Duration) {
			a.log.Warn("api: gateway: the listening connection failed; reconnecting",
				slog.String("error", err.Error()), slog.Duration("in", wait))
		})
}
