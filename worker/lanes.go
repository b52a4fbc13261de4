package worker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmq/llmq/shaping"
)

// lane is one model's shaping lane (one per upstream of its pool, pool.go)
// and the priority queue in front of it.
// One dispatcher goroutine per lane takes the most urgent waiting job (by
// priority with aging; jobs arrive in claim order, fallbacks from other
// lanes) and waits in the shaper for it, so admission order follows
// priority while the shaper keeps its strict FIFO among admitted
// reservations.
type lane struct {
	// model is the lane's model; entry names its pool entry ("" for a
	// model without a pool), up the upstream it calls and quotaKey its
	// key in the quota ledger.
	model, entry string
	up           Upstream
	quotaKey     string
	shaper       *shaping.Lane
	sched        *Scheduler[*ticket]
	// pending counts the jobs of this worker bound for the lane that hold
	// no permit: claimed and not yet admitted, or backing off. The
	// scheduler claims the lane's headroom minus these; pendingTokens are
	// their tokens (as the claim counts them), taken from its token room.
	pending       atomic.Int64
	pendingTokens atomic.Int64
	// backlog: the model's last claim left queued jobs (or could take
	// none), so the lane could use more of the quota (its demand).
	backlog atomic.Bool
	// typ is the running mean of the requests claimed for the lane (a
	// request's prompt and output allowance), the unit of its headroom.
	typMu  sync.Mutex
	typ    float64
	typOut int
	// quick is the running mean of the requests claimed no larger than
	// the typical one: the size of the quick jobs a staged burst's
	// canary waits for (canaryReady).
	quick float64
	// incident holds the lane during a provider incident (incident.go);
	// nil when the worker runs without.
	incident *incident
	// health is the model's last calls, for its capacity's health factor.
	health health
	// unshared is when the dispatcher first found the lane on share 0
	// (another replica holds the whole quota), zero while it has a share;
	// quickBy is until when the dispatcher holds the tickets larger than
	// the typical one, leaving the staged burst's trials to quick ones
	// (zero: no hold since the last canary went; canaryReady). Only the
	// lane's dispatch goroutine reads and writes them.
	unshared, quickBy time.Time
	// quickWanted asks the claimer for that many quick jobs, up to the
	// canary.
	quickWanted atomic.Int64
}

// typicalWeight is the weight of the newest request in the lane's mean.
const typicalWeight = 0.05

// observe folds a claimed request into the lane's typical request.
func (l *lane) observe(req shaping.Request) {
	l.typMu.Lock()
	defer l.typMu.Unlock()
	n := float64(req.PromptTokens + req.MaxOutputTokens)
	switch {
	case l.quick == 0:
		l.quick = n
	case n <= l.typ:
		l.quick += typicalWeight * (n - l.quick)
	}
	if l.typ == 0 {
		l.typ = n
		return
	}
	l.typ += typicalWeight * (n - l.typ)
}

// quickTypical is the lane's typical quick request (quick).
func (l *lane) quickTypical() shaping.Request {
	l.typMu.Lock()
	defer l.typMu.Unlock()
	return shaping.Request{MaxOutputTokens: int(l.quick + 0.5)}
}

// typical is the lane's typical request (before any claim: no prompt, the
// default output allowance).
func (l *lane) typical() shaping.Request {
	l.typMu.Lock()
	defer l.typMu.Unlock()
	if l.typ == 0 {
		return shaping.Request{MaxOutputTokens: l.typOut}
	}
	return shaping.Request{MaxOutputTokens: int(l.typ + 0.5)}
}

// ticket is one job waiting for admission. Whoever moves state away from
// ticketWaiting first owns the outcome: the dispatcher answers on done, or
// the job abandons the ticket (its context ended) and the dispatcher gives
// back any permit it got for it.
type ticket struct {
	ctx context.Context
	req shaping.Request
	// scopes are the job's tenant and project quota layers: the
	// dispatcher takes the ticket only when they admit it now, holding a
	// call of each (tenantquota.go).
	scopes []*scopeQuota
	// maxPause, when > 0, is how long the lane's buckets or a 429 pause
	// may hold this ticket: the job has a fallback model and moves on
	// rather than wait longer.
	maxPause time.Duration
	done     chan admission // buffered 1
	state    atomic.Int32
}

// errLanePaused answers a ticket whose lane would hold it longer than the
// ticket may wait: paused by 429s, or its buckets drained (by this
// worker's calls or, as the server's headers tell, another client's).
// errLaneUnshared reports a ticket that waited on share 0 for as long as
// a handover takes (admitTicket).
var errLaneUnshared = errors.New("worker: another replica holds the model's whole quota")

var errLanePaused = errors.New("worker: model rate limited (its lane would hold the job past retry.fallback_max_wait)")

const (
	ticketWaiting int32 = iota
	ticketAnswered
	ticketAbandoned
)

// answer hands the admission to the job, or gives it back if the job left.
func (t *ticket) answer(a admission) {
	if t.state.CompareAndSwap(ticketWaiting, ticketAnswered) {
		t.done <- a
		return
	}
	a.permit.Cancel() // a no-op for the zero Permit of a failed admission
	a.notCalled()
	a.releaseScopes()
}

// wait returns the admission, or ctx's error when ctx ends first.
func (t *ticket) wait(ctx context.Context) admission {
	select {
	case a := <-t.done:
		return a
	case <-ctx.Done():
		if t.state.CompareAndSwap(ticketWaiting, ticketAbandoned) {
			return admission{err: ctx.Err()}
		}
		return <-t.done
	}
}

type admission struct {
	permit shaping.Permit
	err    error
	// incident is the lane's breaker, told how the call admitted went
	// (nil when no call was admitted or the lane has none); probe: the
	// call is its probe.
	incident *incident
	probe    bool
	// waited is how long the job waited for the admission.
	waited time.Duration
	// scopes hold a call each while the permit lives (nil after a failed
	// admission: the dispatcher gave them back).
	scopes  []*scopeQuota
	release func([]*scopeQuota)
}

// releaseScopes gives back the scopes' calls of a permit that is done or
// cancelled.
func (a admission) releaseScopes() {
	if a.release != nil {
		a.release(a.scopes)
	}
}

// notCalled reports an admitted call that was not made.
func (a admission) notCalled() {
	if a.incident != nil {
		a.incident.notCalled(a.probe)
	}
}

// lane returns the lane of model (of its first pool entry), starting it on
// first use.
func (ls *laneSet) lane(model string) *lane { return ls.laneAt(model, 0) }

// laneAt returns the lane of entry i of model's pool (i is 0 for a model
// without a pool), starting it on first use.
func (ls *laneSet) laneAt(model string, i int) *lane {
	pool := ls.pool(model)
	entry := ""
	if len(pool) > 0 {
		entry = pool[i].Name
	}
	name := laneName(model, entry)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l, ok := ls.lanes[name]; ok {
		return l
	}
	// First use: the lane's settings (its entry's, for a pool).
	up, quotaKey, label, m := ls.cfg.Upstream, ls.quotaKey(model), model, ls.model(model)
	if entry != "" {
		e := pool[i]
		up, quotaKey, label = e.Upstream, ls.quotaKeys(model)[i], model+"@"+entry
		m.RPM, m.TPM, m.Concurrency = e.RPM, e.TPM, e.Concurrency
	}
	strategy := shaping.StrategyFor(ls.cfg.Strategy, m.RPM, m.TPM)
	if ls.cfg.Strategy != "" && strategy != ls.cfg.Strategy {
		ls.cfg.Log.Info("lane without the quota its strategy needs: it learns the quota from the provider",
			"model", model, "entry", entry, "strategy", string(ls.cfg.Strategy), "runs", string(strategy))
	}
	shaper, err := shaping.NewLane(shaping.LaneConfig{
		Name: label, Strategy: strategy, RPM: m.RPM, TPM: m.TPM,
		Concurrency: m.Concurrency, DefaultMaxOutput: m.MaxOutputDefault, Clock: ls.cfg.Clock,
	})
	if err != nil {
		// The settings were validated at start-up; a lane that cannot be
		// built falls back to no shaping rather than stopping all work.
		ls.cfg.Log.Error("build shaping lane; using strategy retry", "model", model, "entry", entry, "error", err)
		shaper, _ = shaping.NewLane(shaping.LaneConfig{Name: label, Strategy: shaping.StrategyRetry, Clock: ls.cfg.Clock})
	}
	if ls.cfg.Share != nil {
		// In [0, 1] by construction.
		_ = shaper.SetShare(ls.cfg.Share(ls.stopCtx, quotaKey))
	}
	l := &lane{model: model, entry: entry, up: up, quotaKey: quotaKey, shaper: shaper,
		sched: NewScheduler[*ticket](ls.cfg.AgingStep, ls.cfg.Clock), typOut: m.MaxOutputDefault,
		incident: ls.newIncident(model, entry)}
	ls.lanes[name] = l
	ls.running.Add(1)
	go ls.dispatch(l)
	return l
}

// dispatch admits the lane's tickets one at a time in scheduler order until
// the worker's work context ends.
func (ls *laneSet) dispatch(l *lane) {
	defer ls.running.Done()
	for {
		// A ticket whose tenant or project is spent stays in the queue:
		// the next ticket its scopes admit goes first.
		t, err := l.sched.PopReady(ls.workCtx, func(t *ticket) (bool, time.Time) {
			if ok, at := ls.canaryReady(l, t); !ok {
				return false, at
			}
			return ls.cfg.Scopes.scopeReady(t)
		}, ls.cfg.Scopes.changed)
		if err != nil {
			return
		}
		if t.state.Load() == ticketAbandoned {
			ls.cfg.Scopes.releaseScopes(t.scopes)
			continue
		}
		probe, ok := ls.holdForIncident(l, t)
		if !ok {
			ls.cfg.Scopes.releaseScopes(t.scopes)
			continue // the job left (its ticket answers itself), or the worker stops
		}
		p, err := ls.admitTicket(l, t)
		if err != nil {
			ls.cfg.Scopes.releaseScopes(t.scopes)
			if l.incident != nil {
				l.incident.notCalled(probe)
			}
			t.answer(admission{err: err})
			continue
		}
		t.answer(admission{permit: p, incident: l.incident, probe: probe, scopes: t.scopes, release: ls.cfg.Scopes.releaseScopes})
	}
}

// quickCanaryWait is the longest the dispatcher holds the larger tickets,
// once per canary, for the quick jobs the claimer fetches: a claim and a
// job's start take a few milliseconds, a document's answer comes a tenth
// of a second or more after a question's.
const quickCanaryWait = 50 * time.Millisecond

// canaryReady is the dispatcher's test of a ticket against the staged
// burst (docs/design/rate-limiting.md#pacing-inside-the-slot). The
// canary's answer releases the next stage, and a quick one answers
// sooner: when the lane's quick requests would fill the trials up to a
// canary past the requests' trial, the tickets larger than the lane's
// typical request wait, at most quickCanaryWait, leaving the trials to
// the quick ones (the claimer is asked for as many as the lane sends up to
// that canary). Meanwhile a quick ticket goes only within the trials or
// past the requests' one: past the tokens' trial alone it would test the
// provider's bucket by its few tokens. It runs under the scheduler's lock.
func (ls *laneSet) canaryReady(l *lane, t *ticket) (bool, time.Time) {
	now := ls.cfg.Clock.Now()
	n, past := l.shaper.CanaryAfter(now, t.req)
	if n == 0 {
		l.quickBy = time.Time{}
		return true, time.Time{}
	}
	holding := now.Before(l.quickBy)
	if requestTokens(t.req) <= requestTokens(l.typical()) {
		if n > 1 || past || !holding {
			return true, time.Time{}
		}
		return false, l.quickBy
	}
	if l.quickBy.IsZero() {
		k, strong := l.shaper.CanaryAfter(now, l.quickTypical())
		if !strong {
			return true, time.Time{}
		}
		l.quickBy, holding = now.Add(quickCanaryWait), true
		l.quickWanted.Store(int64(k))
		ls.cfg.CanaryWanted()
	}
	if holding {
		return false, l.quickBy
	}
	return true, time.Time{}
}

// requestTokens is the size of req as a lane's typical request counts it.
func requestTokens(req shaping.Request) int { return req.PromptTokens + req.MaxOutputTokens }

// admitTicket admits t in l: a ticket with a fallback waits at most its
// maxPause for the lane's buckets and pauses (errLanePaused after that,
// known at once from the buckets), and every ticket at most until its
// context's deadline (a *shaping.WaitError). On share 0 (another replica
// holds the whole quota of a short bucket, docs/design/replicas.md) a
// ticket waits at most until the lane has been unshared for a ledger lease
// and period, long enough for a handover to give it a share, then gets
// errLaneUnshared: the job goes back to queued for the holder to claim,
// rather than wait in this replica for the whole backlog (or past its
// deadline).
func (ls *laneSet) admitTicket(l *lane, t *ticket) (shaping.Permit, error) {
	now := ls.cfg.Clock.Now()
	var by time.Time
	if t.maxPause > 0 {
		by = now.Add(t.maxPause)
	}
	unshared := false
	if l.shaper.Share() == 0 {
		if l.unshared.IsZero() {
			l.unshared = now
		}
		if end := l.unshared.Add(ls.cfg.LedgerLease + ls.cfg.LedgerPeriod); by.IsZero() || end.Before(by) {
			by, unshared = end, true
		}
	} else {
		l.unshared = time.Time{}
	}
	if by.IsZero() {
		return l.shaper.Admit(t.ctx, t.req)
	}
	p, err := l.shaper.AdmitBy(t.ctx, t.req, by)
	var we *shaping.WaitError
	if errors.As(err, &we) && we.Deadline.Equal(by) {
		switch {
		case !unshared:
			return p, errLanePaused
		case l.shaper.Share() == 0:
			return p, errLaneUnshared
		}
		// The share came back as the wait ended: admitted as any ticket.
		return ls.admitTicket(l, t)
	}
	return p, err
}
