package worker

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
)

// Tenants' and projects' own quotas (docs/design/tenants.md): a configured
// scope with an rpm, tpm or concurrency is a layer every admission of its
// jobs passes with the provider lane's, reserved together or not at all;
// replicas share it through the quota ledger. A scope is made on first use,
// and only for a configured scope with a limit. How each limit is applied:
// docs/design/tenants.md#scope-quotas-in-the-worker.

// scopeQuota is one configured tenant's or project's quota layer in this
// worker.
type scopeQuota struct {
	ref store.ScopeRef
	// name is "tenant:<t>" or "project:<t>/<p>": its buckets' name, its
	// ledger key and its metric label.
	name string
	cfg  llmq.Scope
	// quotas are its RPM and TPM buckets as a request carries them.
	quotas   []shaping.Quota
	rpm, tpm *shaping.Bucket
	// limit is the concurrency on this replica's share (0: none);
	// inFlight the calls it admitted that are not done.
	limit, inFlight atomic.Int64
	// counts: it has a concurrency limit, so it counts its calls (a
	// change of limits keeps it: reconfigure).
	counts bool
	// pending counts the jobs of the scope this worker holds that hold no
	// permit (claimed and waiting, backing off): what a claim already
	// has of its room.
	pending atomic.Int64
	// held: the scheduler's last look found it spent (its demand in the
	// ledger counts a backlog).
	held atomic.Bool
	// share is the part of the scope's quota this replica runs on; cfg
	// is guarded by shareMu too (reconfigure).
	shareMu sync.Mutex
	share   float64
}

// limited reports a scope with a quota of its own.
func limited(s llmq.Scope) bool { return s.RPM > 0 || s.TPM > 0 || s.Concurrency > 0 }

// scopeName names a tenant's or a project's scope.
func scopeName(ref store.ScopeRef) string {
	if ref.Project == "" {
		return "tenant:" + ref.Tenant
	}
	return "project:" + ref.Tenant + "/" + ref.Project
}

// scopesConfig configures the scopes.
type scopesConfig struct {
	// Tenants are the tenants applied now, with their quotas. Required.
	Tenants func() llmq.Tenants
	// ClaimHorizon is how far ahead a claim counts a scope's room (0:
	// ClaimHorizonDefault).
	ClaimHorizon time.Duration
	// Share is a new scope's share of its quota from the ledger (nil: the
	// whole quota).
	Share   func(key string) float64
	Metrics *scopeMetrics // required
	Clock   clockwork.Clock
}

// scopes are the worker's scope quotas, made on first use.
type scopes struct {
	cfg    scopesConfig
	mu     sync.Mutex
	byName map[string]*scopeQuota
	// wakeMu guards wake, closed (and replaced) when a scope's calls are
	// given back or its concurrency grows: dispatchers holding jobs for a
	// scope ask again.
	wakeMu sync.Mutex
	wake   chan struct{}
}

func newScopes(cfg scopesConfig) (*scopes, error) {
	if cfg.ClaimHorizon <= 0 {
		cfg.ClaimHorizon = ClaimHorizonDefault
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.Tenants == nil || cfg.Metrics == nil {
		return nil, errors.New("worker: scopes: Tenants and Metrics are required")
	}
	return &scopes{cfg: cfg}, nil
}

// changed is the channel closed at the next release.
func (ss *scopes) changed() <-chan struct{} {
	ss.wakeMu.Lock()
	defer ss.wakeMu.Unlock()
	if ss.wake == nil {
		ss.wake = make(chan struct{})
	}
	return ss.wake
}

func (ss *scopes) signal() {
	ss.wakeMu.Lock()
	defer ss.wakeMu.Unlock()
	if ss.wake != nil {
		close(ss.wake)
		ss.wake = nil
	}
}

// list returns the scopes made so far.
func (ss *scopes) list() []*scopeQuota {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	out := make([]*scopeQuota, 0, len(ss.byName))
	for _, sc := range ss.byName {
		out = append(out, sc)
	}
	return out
}

// tenantsNow are the tenants the worker applies now: LiveTenants', else
// the configured ones.
func (w *Worker) tenantsNow() llmq.Tenants {
	if w.cfg.LiveTenants != nil {
		return w.cfg.LiveTenants()
	}
	return w.cfg.Tenants
}

// TenantsChanged applies LiveTenants to the scopes made so far at once
// (their limits; a scope whose tenant or project lost every limit, or
// gained or lost a kind of limit, is made afresh at its next job). The
// app calls it at every load of the tenancy.
func (w *Worker) TenantsChanged() { w.scopes.tenantsChanged() }

// tenantsChanged applies the tenants applied now to the scopes made so
// far (Worker.TenantsChanged).
func (ss *scopes) tenantsChanged() {
	ts := ss.cfg.Tenants()
	now := ss.cfg.Clock.Now()
	ss.mu.Lock()
	for name, sc := range ss.byName {
		cfg, ok := scopeConfig(ts, sc.ref)
		if !ok || !sc.reconfigure(now, cfg) {
			delete(ss.byName, name)
		}
	}
	ss.mu.Unlock()
	ss.signal()
}

// scopeConfig is ref's scope in ts, when it has a limit.
func scopeConfig(ts llmq.Tenants, ref store.ScopeRef) (llmq.Scope, bool) {
	t, ok := ts[ref.Tenant]
	if !ok {
		return llmq.Scope{}, false
	}
	s := t.Scope
	if ref.Project != "" {
		if s, ok = t.Projects[ref.Project]; !ok {
			return llmq.Scope{}, false
		}
	}
	return s, limited(s)
}

// reconfigure moves sc to cfg's limits in place and reports true, when
// cfg limits the same kinds (rpm, tpm, concurrency) as sc's; false when
// sc must be made afresh.
func (sc *scopeQuota) reconfigure(now time.Time, cfg llmq.Scope) bool {
	sc.shareMu.Lock()
	defer sc.shareMu.Unlock()
	old := sc.cfg
	if (old.RPM > 0) != (cfg.RPM > 0) || (old.TPM > 0) != (cfg.TPM > 0) || (old.Concurrency > 0) != (cfg.Concurrency > 0) {
		return false
	}
	sc.cfg = cfg
	if sc.rpm != nil && cfg.RPM != old.RPM {
		_ = sc.rpm.ShareAt(now, cfg.RPM, sc.share)
	}
	if sc.tpm != nil && cfg.TPM != old.TPM {
		_ = sc.tpm.ShareAt(now, cfg.TPM, sc.share)
	}
	if c := cfg.Concurrency; c > 0 {
		sc.limit.Store(max(1, int64(math.Floor(float64(c)*sc.share+1e-9))))
	}
	return true
}

// limits returns sc's configured scope.
func (sc *scopeQuota) limits() llmq.Scope {
	sc.shareMu.Lock()
	defer sc.shareMu.Unlock()
	return sc.cfg
}

// scopesOf returns the quota layers of a job of tenant and project: its
// tenant's and its project's, those configured with a limit; nil for
// most jobs.
func (ss *scopes) scopesOf(tenant, project string) []*scopeQuota {
	t, ok := ss.cfg.Tenants()[tenant]
	if !ok {
		return nil
	}
	var out []*scopeQuota
	if limited(t.Scope) {
		out = append(out, ss.scope(store.ScopeRef{Tenant: tenant}, t.Scope))
	}
	if p, ok := t.Projects[project]; ok && project != "" && limited(p) {
		out = append(out, ss.scope(store.ScopeRef{Tenant: tenant, Project: project}, p))
	}
	return out
}

// scope returns the scope of ref, making it on first use: on the share
// the ledger gives it, when replicas share quotas.
func (ss *scopes) scope(ref store.ScopeRef, cfg llmq.Scope) *scopeQuota {
	name := scopeName(ref)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if sc, ok := ss.byName[name]; ok {
		return sc
	}
	now := ss.cfg.Clock.Now()
	sc := &scopeQuota{ref: ref, name: name, cfg: cfg, share: 1, counts: cfg.Concurrency > 0}
	// The limits are validated finite and not negative: a bucket of a
	// positive limit is always made.
	if cfg.RPM > 0 {
		sc.rpm, _ = shaping.NewBucket(shaping.BucketConfig{Name: name + "/rpm", Limit: cfg.RPM}, now)
		sc.quotas = append(sc.quotas, shaping.Quota{Bucket: sc.rpm, Unit: shaping.UnitRequests})
	}
	if cfg.TPM > 0 {
		sc.tpm, _ = shaping.NewBucket(shaping.BucketConfig{Name: name + "/tpm", Limit: cfg.TPM}, now)
		sc.quotas = append(sc.quotas, shaping.Quota{Bucket: sc.tpm, Unit: shaping.UnitTokens})
	}
	sc.limit.Store(int64(cfg.Concurrency))
	if ss.cfg.Share != nil {
		sc.setShare(now, ss.cfg.Share(scopeKey(name)))
	}
	if ss.byName == nil {
		ss.byName = map[string]*scopeQuota{}
	}
	ss.byName[name] = sc
	return sc
}

// setShare runs sc on share of its configured quota: its buckets' refill
// and capacity, and its concurrency (at least 1, so a replica with a job
// of the scope can run it).
func (sc *scopeQuota) setShare(now time.Time, share float64) {
	sc.shareMu.Lock()
	defer sc.shareMu.Unlock()
	if share == sc.share {
		return
	}
	sc.share = share
	// share is in (0, 1] by construction, the limits positive.
	if sc.rpm != nil {
		_ = sc.rpm.ShareAt(now, sc.cfg.RPM, share)
	}
	if sc.tpm != nil {
		_ = sc.tpm.ShareAt(now, sc.cfg.TPM, share)
	}
	if c := sc.cfg.Concurrency; c > 0 {
		sc.limit.Store(max(1, int64(math.Floor(float64(c)*share+1e-9))))
	}
}

// shareNow is the share sc runs on.
func (sc *scopeQuota) shareNow() float64 {
	sc.shareMu.Lock()
	defer sc.shareMu.Unlock()
	return sc.share
}

// requestQuotas are the buckets of scs, as a request carries them.
func requestQuotas(scs []*scopeQuota) []shaping.Quota {
	var qs []shaping.Quota
	for _, sc := range scs {
		qs = append(qs, sc.quotas...)
	}
	return qs
}

// readyAt is when sc admits a request of tokens: now when its buckets
// cover it at once and a call is free; a later time while a bucket
// refills; zero when it waits for a call to end (a release wakes it).
// A request its buckets can never hold counts as ready: the lane's
// admission refuses it for good.
func (sc *scopeQuota) readyAt(now time.Time, tokens int) time.Time {
	if lim := sc.limit.Load(); lim > 0 && sc.inFlight.Load() >= lim {
		return time.Time{}
	}
	ready := now
	for _, q := range sc.quotas {
		cost := 1.0
		if q.Unit == shaping.UnitTokens {
			cost = float64(tokens)
		}
		if at, err := q.Bucket.ReadyFor(now, cost); err == nil && at.After(ready) {
			ready = at
		}
	}
	return ready
}

// acquire takes a call of sc; false when its concurrency is spent.
func (sc *scopeQuota) acquire() bool {
	lim := sc.limit.Load()
	if lim <= 0 {
		return true
	}
	for {
		n := sc.inFlight.Load()
		if n >= lim {
			return false
		}
		if sc.inFlight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release gives back a call of sc.
func (sc *scopeQuota) release() {
	if sc.counts {
		sc.inFlight.Add(-1)
	}
}

// scopeReady is the dispatcher's test of a ticket: true when every scope
// of its job admits it now, and then it holds a call of each (all or
// none); else false and when to ask again (zero: at a release).
func (ss *scopes) scopeReady(t *ticket) (bool, time.Time) {
	if len(t.scopes) == 0 {
		return true, time.Time{}
	}
	now := ss.cfg.Clock.Now()
	tokens := t.req.PromptTokens + t.req.MaxOutputTokens
	var retry time.Time
	for _, sc := range t.scopes {
		at := sc.readyAt(now, tokens)
		if at.IsZero() {
			return false, time.Time{}
		}
		if at.After(now) && (retry.IsZero() || at.After(retry)) {
			retry = at
		}
	}
	if !retry.IsZero() {
		return false, retry
	}
	for i, sc := range t.scopes {
		if !sc.acquire() {
			ss.releaseScopes(t.scopes[:i])
			return false, time.Time{}
		}
	}
	return true, time.Time{}
}

// releaseScopes gives back a call of each of scs.
func (ss *scopes) releaseScopes(scs []*scopeQuota) {
	if len(scs) == 0 {
		return
	}
	for _, sc := range scs {
		sc.release()
	}
	ss.signal()
}

// claimScopes are what a claim of a lane with typical requests may take
// of the configured tenants and projects: each limited tenant's cap (the
// requests its quota admits within the claim horizon, less the jobs of it
// this worker holds without a permit; 0 when spent) and the projects
// whose quota is spent, and the room of each limited project that has
// some (the claim holds projects, it does not cap them: claim hands the
// surplus back). A scope not made yet counts as full. The spent scopes are
// added to held.
func (ss *scopes) claimScopes(now time.Time, typical shaping.Request, held map[store.ScopeRef]bool) (map[string]int, []store.ScopeRef, map[store.ScopeRef]int) {
	ts := ss.cfg.Tenants()
	if len(ts) == 0 {
		return nil, nil, nil
	}
	tokens := typical.PromptTokens + typical.MaxOutputTokens
	ss.mu.Lock()
	made := ss.byName
	room := func(ref store.ScopeRef, cfg llmq.Scope) int {
		if sc, ok := made[scopeName(ref)]; ok {
			return sc.room(now, ss.cfg.ClaimHorizon, tokens)
		}
		return fullRoom(cfg, tokens)
	}
	var caps map[string]int
	var projects []store.ScopeRef
	var rooms map[store.ScopeRef]int
	for tenant, t := range ts {
		ref := store.ScopeRef{Tenant: tenant}
		if t.Paused {
			// A paused tenant takes no turn (waiting reason paused).
			if caps == nil {
				caps = map[string]int{}
			}
			caps[tenant] = 0
			continue
		}
		if limited(t.Scope) {
			n := max(0, room(ref, t.Scope))
			if caps == nil {
				caps = map[string]int{}
			}
			caps[tenant] = n
			if n == 0 {
				held[ref] = true
			}
		}
		for project, p := range t.Projects {
			pref := store.ScopeRef{Tenant: tenant, Project: project}
			if p.Paused {
				projects = append(projects, pref)
				continue
			}
			if !limited(p) {
				continue
			}
			if n := room(pref, p); n > 0 {
				if rooms == nil {
					rooms = map[store.ScopeRef]int{}
				}
				rooms[pref] = n
			} else {
				projects = append(projects, pref)
				held[pref] = true
			}
		}
	}
	ss.mu.Unlock()
	for _, sc := range ss.list() {
		sc.held.Store(held[sc.ref])
	}
	return caps, projects, rooms
}

// room is how many more requests of tokens sc admits within horizon than
// the jobs of it held without a permit: the least of its buckets' headroom
// and its free calls. Negative when it holds more than that.
func (sc *scopeQuota) room(now time.Time, horizon time.Duration, tokens int) int {
	n := math.MaxInt32
	if sc.rpm != nil {
		n = min(n, sc.rpm.HeadroomAt(now, horizon, 1))
	}
	if sc.tpm != nil {
		n = min(n, sc.tpm.HeadroomAt(now, horizon, float64(tokens)))
	}
	if lim := sc.limit.Load(); lim > 0 {
		n = min(n, int(lim-sc.inFlight.Load()))
	}
	return n - int(sc.pending.Load())
}

// fullRoom is the room of a scope not made yet: full buckets, no call.
func fullRoom(cfg llmq.Scope, tokens int) int {
	n := math.MaxInt32
	if cfg.RPM > 0 {
		n = min(n, int(cfg.RPM))
	}
	if cfg.TPM > 0 {
		n = min(n, int(cfg.TPM/float64(max(1, tokens))))
	}
	if cfg.Concurrency > 0 {
		n = min(n, cfg.Concurrency)
	}
	return max(1, n)
}
