package worker

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
)

// Schedule: per model with queued jobs, claim from Postgres only what the
// model's shaping lane can admit within Config.ClaimHorizon, minus the jobs
// this worker already claimed and has not admitted yet. So the backlog
// stays queued in Postgres, in claim order (deadline, the tenants' fair
// share, then store.ClaimOrderDefault inside a tenant), and
// only a handful of jobs is running at a time; Postgres orders the work,
// not the broker.

const (
	// claimMax bounds the jobs of one claim.
	claimMax = 256
	// fallbackClaim bounds the jobs held for a lane paused by 429s, whose
	// jobs can only move on to a fallback model.
	fallbackClaim = 16
	// modelsRefresh is how often the models with queued jobs are read
	// from Postgres (jobs other workers or the producer recorded).
	modelsRefresh = 500 * time.Millisecond
	// stateRefresh is how often a model's waiting reason is written again
	// while it holds.
	stateRefresh = time.Second
	// claimTimeout bounds one claim.
	claimTimeout = 30 * time.Second
)

// scheduleLoop claims work until Stop: at every wake-up (jobs ingested, a
// job finished, expired leases reaped) and every quarter of the claim
// horizon (buckets refill).
func (c *claimer) scheduleLoop(ctx context.Context) {
	defer c.running.Done()
	tick := c.cfg.Clock.NewTicker(max(c.cfg.ClaimHorizon/4, time.Millisecond))
	defer tick.Stop()
	s := &scheduler{models: map[string]bool{}, heldSince: map[string]time.Time{}, notes: map[string]modelNote{}, scopeNotes: map[store.ScopeRef]time.Time{}}
	for {
		s.wake = c.takeWake()
		c.releaseUnanswered(ctx)
		c.scheduleRound(ctx, s)
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		case <-tick.Chan():
		}
	}
}

// takeWake is the first wake-up asked since the last round began, or the
// tick's now, and forgets it.
func (c *claimer) takeWake() claimWake {
	c.modelsMu.Lock()
	w := c.woke
	c.woke = claimWake{}
	c.modelsMu.Unlock()
	if w.at.IsZero() {
		w = claimWake{at: c.cfg.Clock.Now(), by: wokenByTick}
	}
	return w
}

// scheduler is the state of the schedule loop.
type scheduler struct {
	// wake is what woke the round, and when; heldSince, by model, since
	// when the rounds found its lanes without room or filled them with a
	// claim, until a claim comes back short.
	wake      claimWake
	heldSince map[string]time.Time
	// models are the models that may have queued jobs.
	models map[string]bool
	// readAt is when QueuedModels was last read.
	readAt time.Time
	// notes are the waiting reasons last written, by model.
	notes map[string]modelNote
	// scopeNotes are the tenants and projects last written as held by
	// their own quota, and when.
	scopeNotes map[store.ScopeRef]time.Time
}

// held notes that model's lanes had no room at now, unless noted since an
// earlier round.
func (s *scheduler) held(model string, now time.Time) {
	if _, ok := s.heldSince[model]; !ok {
		s.heldSince[model] = now
	}
}

// modelNote is a model state as last written.
type modelNote struct {
	reason string
	hold   bool
	at     time.Time
}

// scheduleRound claims for every model that may have queued jobs.
func (c *claimer) scheduleRound(ctx context.Context, s *scheduler) {
	now := c.cfg.Clock.Now()
	if now.Sub(s.readAt) >= modelsRefresh || c.reread.Swap(false) {
		s.readAt = now
		if models, err := c.cfg.Store.QueuedModels(ctx); err == nil {
			for _, m := range models {
				s.models[m] = true
			}
		}
	}
	c.modelsMu.Lock()
	for m := range c.newModels {
		s.models[m] = true
	}
	clear(c.newModels)
	c.modelsMu.Unlock()
	var hold BatchHold
	if c.cfg.Router != nil {
		hold = c.cfg.Router.Hold(now, c.cfg.Drain())
	}
	held := map[store.ScopeRef]bool{}
	for m := range s.models {
		if ctx.Err() != nil {
			return
		}
		if c.claimFor(ctx, s, m, hold, held) {
			delete(s.models, m)
		}
	}
	c.noteScopes(ctx, s, held)
	c.cfg.Holds.scopes(held, now)
}

// claimFor claims the jobs model's lane can take soon, and of each
// tenant with a quota of its own what that quota admits soon (the scopes
// it finds spent are added to held), and reports whether the model has no
// queued job left (the claim came back short).
func (c *claimer) claimFor(ctx context.Context, s *scheduler, model string, hold BatchHold, held map[store.ScopeRef]bool) (drained bool) {
	room := c.cfg.MaxInFlight - int(c.cfg.Held())
	if !c.cfg.Catalog().Allows(model) {
		// Jobs another path recorded with a model the catalog does not
		// allow: claimed to be dead-lettered (start), with no lane and no
		// model state.
		want := min(room, claimMax)
		n, _, err := c.claim(ctx, s.wake, time.Time{}, store.ClaimRequest{Model: model, Limit: want}, nil)
		return want > 0 && err == nil && n < want
	}
	// A model with a pool of keys has a lane per key: the headroom is
	// theirs together, and it is paused when all of them are.
	lanes := c.cfg.Lanes.lanesOf(model)
	now := c.cfg.Clock.Now()
	typical := lanes[0].typical()
	lr := c.laneRoomOf(model, lanes, now, typical)
	want, fallbackOnly, tokenRoom := c.claimWant(model, lr)
	want = min(want, room, claimMax)
	// Asked even when nothing is claimed, so that the scopes held stay
	// noted while the provider's quota binds too.
	caps, heldProjects, rooms := c.cfg.Scopes.claimScopes(now, typical, held)
	if quick := quickWanted(lanes); quick > 0 && len(caps) == 0 && len(heldProjects) == 0 && len(rooms) == 0 && room > 0 {
		// A lane leaves its staged burst's trials to quick jobs up to a
		// canary past the requests' trial (lanes.go, canaryReady): the
		// smallest queued jobs, each no larger than its typical one.
		// Not under a tenant's or project's quota, whose room the claim
		// below counts.
		size := typical.PromptTokens + typical.MaxOutputTokens
		quick = min(quick, room)
		n, _, err := c.claim(ctx, s.wake, s.heldSince[model], store.ClaimRequest{
			Model: model, Limit: quick, Order: quickOrder, TypicalTokens: size,
			HoldDeferrable: hold.Hold, HoldDeadlineAfter: hold.DeadlineAfter, LiveReason: hold.LiveReason,
			TokenRoom: float64(quick * max(1, size)),
		}, nil)
		if err == nil {
			want = min(want, room-n)
		}
	}
	if want <= 0 {
		s.held(model, now)
		setBacklog(lanes, true)
		c.note(ctx, s, model, store.WaitingReasonProviderQuota, hold.Hold)
		return false
	}
	n, left, err := c.claim(ctx, s.wake, s.heldSince[model], store.ClaimRequest{
		Model: model, Limit: want, FallbackOnly: fallbackOnly,
		TypicalTokens:  typical.PromptTokens + typical.MaxOutputTokens,
		HoldDeferrable: hold.Hold, HoldDeadlineAfter: hold.DeadlineAfter, LiveReason: hold.LiveReason,
		TenantCaps: caps, HeldProjects: heldProjects, TokenRoom: tokenRoom,
	}, rooms)
	if err != nil {
		return false
	}
	if n < want && !left {
		// Short: no queued job left, unless a tenant's or project's
		// quota left some (the next rounds claim them as it refills).
		delete(s.heldSince, model)
		capped := len(heldProjects) > 0 || len(rooms) > 0
		for _, n := range caps {
			capped = capped || n < want
		}
		setBacklog(lanes, false)
		c.note(ctx, s, model, "", hold.Hold)
		return !capped
	}
	// Full, or short of the tokens the next job needs: the model has a
	// backlog that waits for the provider's quota (the jobs left queued
	// wait for room from now, unless from before).
	s.held(model, c.cfg.Clock.Now())
	setBacklog(lanes, true)
	c.note(ctx, s, model, store.WaitingReasonProviderQuota, hold.Hold)
	return false
}

// quickOrder takes a tenant's smallest queued job first.
var quickOrder = store.ClaimOrder{{Column: "est_prompt_tokens"}, {Column: "est_output_tokens"},
	{Column: "sched_key"}, {Column: "created_at"}, {Column: "id"}}

// quickWanted is how many quick jobs lanes asked for, to send up to their
// canaries, and forgets the asks.
func quickWanted(lanes []*lane) int {
	n := 0
	for _, l := range lanes {
		n += int(l.quickWanted.Swap(0))
	}
	return n
}

// laneRoom is what a model's lanes can take, together.
type laneRoom struct {
	// pending are the jobs waiting in the lanes; want is their headroom
	// past those.
	pending, want int
	// paused: every lane is paused past FallbackMaxWait; unshared: every
	// lane is on share 0; spent: every lane would hold a typical job past
	// FallbackMaxWait.
	paused, unshared, spent bool
	// tokens the lanes' buckets hold, past those of the jobs pending:
	// bounded unless a lane takes any job now (shaping.Lane.TokenRoomAt).
	tokens  float64
	bounded bool
}

// laneRoomOf measures model's lanes (and its unbound jobs) at now.
func (c *claimer) laneRoomOf(model string, lanes []*lane, now time.Time, typical shaping.Request) laneRoom {
	lr := laneRoom{paused: true, unshared: true, spent: true, bounded: true}
	if u := c.cfg.Lanes.unboundOf(model); u != nil {
		lr.pending = int(u.pending.Load())
		lr.want = -lr.pending
		lr.tokens = -float64(u.pendingTokens.Load())
	}
	for _, l := range lanes {
		n := int(l.pending.Load())
		lr.pending += n
		lr.want += l.shaper.HeadroomAt(now, c.cfg.ClaimHorizon, typical) - n
		// Held as by a pause: a 429 pause longer than a job with a
		// fallback waits, or every slot taken while the provider's calls
		// at a time cap them (other clients hold them; AdmitBy sends such
		// a job on after FallbackMaxWait).
		lr.paused = lr.paused && (l.shaper.PausedUntil().Sub(now) > c.cfg.FallbackMaxWait || l.shaper.ProviderHoldsSlots())
		lr.spent = lr.spent && l.shaper.HeldAt(now, c.cfg.FallbackMaxWait, typical)
		lr.unshared = lr.unshared && l.shaper.Share() == 0
		r, b := l.shaper.TokenRoomAt(now)
		lr.tokens += r - float64(l.pendingTokens.Load())
		lr.bounded = lr.bounded && b
	}
	return lr
}

// claimWant is how many of model's jobs to claim given its lanes' room
// (before the caps of the worker and of a claim), whether only jobs with a
// fallback, and the tokens the claim may take (0 when not bounded).
func (c *claimer) claimWant(model string, lr laneRoom) (want int, fallbackOnly bool, tokenRoom float64) {
	want, bounded := lr.want, lr.bounded
	switch {
	case want > 0:
	case lr.paused && slices.Contains(c.cfg.FallbackOn, FallbackOnRateLimit):
		// The lane is paused by 429s for longer than a job with a
		// fallback waits: those jobs may be claimed to move on (all of
		// them when the model itself has fallbacks).
		want = fallbackClaim - lr.pending
		fallbackOnly = len(c.cfg.Catalog().Lookup(model).Fallbacks) == 0
		bounded = false
	case lr.pending == 0 && !lr.unshared:
		// An idle lane gets its next job (below: once its buckets hold
		// it, or are full), which waits in the lane for what else its
		// buckets need (a job larger than they hold, a bucket warming
		// up, the RPM): never more than one such job. Not on share 0:
		// another replica holds the whole quota and claims it. When the
		// buckets would hold even a typical job longer than a job with a
		// fallback waits (spent by other clients, say), whatever tokens
		// they hold: a job with a fallback moves on to it at once.
		want = 1
		bounded = bounded && !lr.spent
	}
	if bounded && want > 0 {
		// In tokens, only what the buckets hold now, not their refill over the
		// horizon: a job that does not fit stays queued in its place, where the jobs
		// before it in the order still pass it
		// (docs/design/queue-of-record.md#claiming-by-tokens-held-now).
		if lr.tokens < 1 {
			want = 0
		}
		tokenRoom = lr.tokens
	}
	return want, fallbackOnly, tokenRoom
}

// setBacklog marks whether lanes' model has a backlog waiting for them.
func setBacklog(lanes []*lane, b bool) {
	for _, l := range lanes {
		l.backlog.Store(b)
	}
}

// claim claims r (as this worker, for its lease) in a round woken by wake,
// for lanes without room since heldSince (zero: they had room), and starts
// the jobs it got, returning how many it claimed and whether r.TokenRoom left a job
// queued. Of a project in rooms it starts at
// most that many jobs: the claim holds a spent project's jobs but does not
// cap one with a little room, and the jobs over it would wait in the lane
// for the project's quota, counting against the model's headroom (so
// against every other project's claims) for as long as it takes. They go
// back to queued at once, their place in the order kept.
func (c *claimer) claim(ctx context.Context, wake claimWake, heldSince time.Time, r store.ClaimRequest, rooms map[store.ScopeRef]int) (n int, left bool, err error) {
	if r.Limit <= 0 {
		return 0, false, nil
	}
	r.Owner, r.Lease = c.cfg.Owner, c.cfg.Lease
	// A claim sent is finished even when Stop begins meanwhile: its jobs
	// are then handed back at once, not left running until their lease
	// ends.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	defer cancel()
	at := claimTimes{heldSince: heldSince, wake: wake, sent: c.cfg.Clock.Now()}
	recs, left, err := c.cfg.Store.ClaimWithin(cctx, r)
	at.got = c.cfg.Clock.Now()
	if err != nil {
		if u, ok := errors.AsType[*store.UnansweredClaimError](err); ok {
			if len(c.unanswered) == unansweredKept {
				c.unanswered = c.unanswered[1:]
			}
			c.unanswered = append(c.unanswered, u)
		}
		if ctx.Err() == nil {
			c.cfg.Log.Debug("claim", slog.String("model", r.Model), slog.Any("error", err))
		}
		return 0, false, err
	}
	c.cfg.Claimed(recs)
	for _, rec := range recs {
		ref := store.ScopeRef{Tenant: rec.Tenant, Project: rec.Project}
		if n, ok := rooms[ref]; ok {
			if n <= 0 {
				if err := c.cfg.Store.Release(cctx, rec.Lease()); err != nil {
					// Its lease ends and the reaper hands it back.
					c.cfg.Log.Debug("release over the project's room", slog.String("job_id", rec.ID), slog.Any("error", err))
				}
				continue
			}
			rooms[ref] = n - 1
		}
		c.cfg.Start(rec, at)
	}
	return len(recs), left, nil
}

// releaseUnanswered hands back the jobs of the claims whose answer was
// lost, if they were written: without it they would wait out their lease
// (a connection that broke as a claim's answer came back left them
// running, held by nobody, for Config.Lease). It runs in the schedule
// loop, between rounds: no claim of this worker is in flight, so none of
// the jobs handed back is one it holds. The round that follows reads the
// queued models again.
func (c *claimer) releaseUnanswered(ctx context.Context) {
	kept := c.unanswered[:0]
	for _, u := range c.unanswered {
		keys, err := c.cfg.Store.ReleaseClaim(ctx, u)
		if err != nil {
			kept = append(kept, u)
			continue
		}
		if len(keys) > 0 {
			c.cfg.Log.Info("jobs of a claim whose answer was lost handed back", slog.Int("jobs", len(keys)))
			c.reread.Store(true)
		}
	}
	clear(c.unanswered[len(kept):])
	c.unanswered = kept
}

// note records why model's queued jobs wait, when it changed or, while
// they wait, at most every stateRefresh.
func (c *claimer) note(ctx context.Context, s *scheduler, model, reason string, hold bool) {
	now := c.cfg.Clock.Now()
	c.cfg.Holds.model(model, reason == store.WaitingReasonProviderQuota, now)
	last, ok := s.notes[model]
	same := ok && last.reason == reason && last.hold == hold
	if same && (reason == "" && !hold || now.Sub(last.at) < stateRefresh) {
		return
	}
	err := c.cfg.Store.SetModelState(ctx, store.ModelState{Model: model, WaitingReason: reason, BatchHold: hold, Worker: c.cfg.Owner})
	if err != nil {
		return
	}
	s.notes[model] = modelNote{reason: reason, hold: hold, at: now}
}

// noteScopes writes the scopes held in this round, each at most every
// stateRefresh while it holds, and frees those no longer held.
func (c *claimer) noteScopes(ctx context.Context, s *scheduler, held map[store.ScopeRef]bool) {
	now := c.cfg.Clock.Now()
	var hold, free []store.ScopeRef
	for ref := range held {
		if at, ok := s.scopeNotes[ref]; !ok || now.Sub(at) >= stateRefresh {
			hold = append(hold, ref)
		}
	}
	for ref := range s.scopeNotes {
		if !held[ref] {
			free = append(free, ref)
		}
	}
	if len(hold) == 0 && len(free) == 0 {
		return
	}
	if err := c.cfg.Store.SetScopeStates(ctx, c.cfg.Owner, hold, free); err != nil {
		return
	}
	for _, ref := range hold {
		s.scopeNotes[ref] = now
	}
	for _, ref := range free {
		delete(s.scopeNotes, ref)
	}
}
