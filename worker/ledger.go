package worker

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
)

// The replicas' shares (docs/design/replicas.md): every LedgerPeriod the
// worker writes, per model, its demand and the share its lane runs on to
// the quota ledger, reads the rows of the other live replicas on the same
// quota, and sets each lane's share (shaping.ReplicaShare). Admission
// never waits for the ledger: the lanes run on the last shares.

// QuotaScopeOf names a provider quota for the ledger: the upstream's base
// URL and a hash of the API key (the key itself never reaches the
// database). Replicas with the same scope share each model's quota.
func QuotaScopeOf(baseURL, apiKey string) string {
	sum := sha256.Sum256([]byte(apiKey))
	return baseURL + " key:" + hex.EncodeToString(sum[:8])
}

// backlogDemand is the demand a lane declares on top of the requests it
// holds while its model has queued jobs it did not claim: a replica with a
// backlog could use the whole quota, so the replicas that have one get
// about equal shares.
const backlogDemand = claimMax

// quotaKey is the ledger's key of model's quota (of a model without a
// pool: quotaKeys).
func (ls *laneSet) quotaKey(model string) string { return ls.cfg.QuotaScope + " " + model }

// scopeKey is the ledger's key of a tenant's or project's quota (named by
// scopeName): one for every provider and model, as the scope's limits are.
func scopeKey(name string) string { return "scope " + name }

// ledgerLane is one of the quotas a round writes: a lane's, or one its
// catalog lists that has no lane yet (l nil).
type ledgerLane struct {
	key string
	l   *lane
}

// quotaLister lists the quotas a round writes besides the scopes': the
// lanes and the catalog's models that have none yet.
type quotaLister interface {
	ledgerLanes() []ledgerLane
}

// ledgerSyncConfig configures a ledgerSync.
type ledgerSyncConfig struct {
	Ledger  QuotaLedger // required
	Quotas  quotaLister // required
	Replica string      // required
	// Scopes are the tenants' and projects' quotas (nil: none).
	Scopes *scopes
	// Period is how often the rows are renewed, Lease how long they live
	// (longer than Period).
	Period, Lease time.Duration
	Clock         clockwork.Clock
	Log           *slog.Logger
}

func (c ledgerSyncConfig) withDefaults() ledgerSyncConfig {
	c.Period = cmp.Or(max(0, c.Period), LedgerPeriodDefault)
	c.Lease = cmp.Or(max(0, c.Lease), LedgerLeaseDefault)
	if c.Scopes == nil {
		c.Scopes = &scopes{}
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return c
}

func (c ledgerSyncConfig) validate() error {
	if c.Ledger == nil || c.Quotas == nil || c.Replica == "" {
		return errors.New("worker: ledger: Ledger, Quotas and Replica are required")
	}
	if c.Lease <= c.Period {
		return fmt.Errorf("worker: ledger: Lease (%v) must be longer than Period (%v)", c.Lease, c.Period)
	}
	return nil
}

// ledgerSync keeps the worker's rows in the quota ledger and its lanes'
// and scopes' shares of the quotas.
type ledgerSync struct {
	cfg ledgerSyncConfig
	// mu guards shares: the share of each quota the ledger last gave.
	mu     sync.Mutex
	shares map[string]float64
}

func newLedgerSync(cfg ledgerSyncConfig) (*ledgerSync, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &ledgerSync{cfg: cfg, shares: make(map[string]float64)}, nil
}

// prime runs the first round: the shares are read before the first claim,
// so that a lane never starts on the whole quota while other replicas run.
func (s *ledgerSync) prime(ctx context.Context) { s.round(ctx) }

// Run renews the rows and sets the shares every Period until ctx ends,
// then deletes the rows, so the other replicas take this one's shares at
// once.
func (s *ledgerSync) Run(ctx context.Context) {
	tick := s.cfg.Clock.NewTicker(s.cfg.Period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Lease)
			defer cancel()
			if err := s.cfg.Ledger.LeaveQuotas(lctx, s.cfg.Replica); err != nil {
				s.cfg.Log.Warn("leave the quota ledger", slog.Any("error", err))
			}
			return
		case <-tick.Chan():
		}
		s.round(ctx)
	}
}

// round renews the rows of every quota (so a replica counts before its
// first job) and sets the shares from the live rows. On an error the
// lanes keep their shares.
func (s *ledgerSync) round(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Lease)
	defer cancel()
	quotas := s.cfg.Quotas.ledgerLanes()
	claims := make([]store.QuotaClaim, len(quotas))
	s.mu.Lock()
	for i, q := range quotas {
		share, ok := s.shares[q.key]
		if !ok {
			share = shaping.ShareFloorDefault // not started yet
		}
		claims[i] = store.QuotaClaim{Key: q.key}
		if q.l != nil {
			claims[i].Demand = q.l.demand()
			share = q.l.shaper.Share()
			st := q.l.shaper.StateAt(s.cfg.Clock.Now())
			claims[i].Provider = store.ProviderState{CreditRequests: st.Requests, CreditTokens: st.Tokens,
				ShortRequests: st.ShortRequests, ShortTokens: st.ShortTokens}
		}
		// The ledger's shares are positive: none of a short bucket is
		// written as the least share.
		claims[i].Share = shaping.LedgerShare(share)
	}
	s.mu.Unlock()
	scs := s.cfg.Scopes.list()
	for _, sc := range scs {
		claims = append(claims, store.QuotaClaim{Key: scopeKey(sc.name), Demand: sc.demand(), Share: sc.shareNow()})
	}
	rows, err := s.cfg.Ledger.RenewQuotas(ctx, s.cfg.Replica, s.cfg.Lease, claims)
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Log.Warn("renew the quota ledger; the lanes keep their shares", slog.Any("error", err))
		}
		return
	}
	now := s.cfg.Clock.Now()
	for _, q := range quotas {
		share := s.shareFrom(rows, q.key)
		if q.l != nil {
			_ = q.l.shaper.SetShareAt(now, share) // in [0, 1] by construction
			q.l.shaper.SetPeersAt(now, s.peersFrom(rows, q.key))
		}
	}
	for _, sc := range scs {
		sc.setShare(now, s.shareFrom(rows, scopeKey(sc.name)))
	}
	if len(scs) > 0 {
		s.cfg.Scopes.signal() // a concurrency may have grown
	}
}

// ledgerLanes lists the lanes the worker has, then one per quota its
// catalog lists that has no lane yet (one per pool entry: each key's quota
// is shared apart).
func (w *Worker) ledgerLanes() []ledgerLane {
	lanes := w.lanes.all()
	var quotas []ledgerLane
	for _, name := range slices.Sorted(maps.Keys(lanes)) {
		quotas = append(quotas, ledgerLane{key: lanes[name].quotaKey, l: lanes[name]})
	}
	for m := range w.catalog().Models {
		for i, key := range w.lanes.quotaKeys(m) {
			entry := ""
			if pool := w.lanes.pool(m); len(pool) > 0 {
				entry = pool[i].Name
			}
			if _, ok := lanes[laneName(m, entry)]; !ok {
				quotas = append(quotas, ledgerLane{key: key})
			}
		}
	}
	return quotas
}

// shareFrom computes the share of the quota of ledger key from the
// ledger rows and remembers it.
func (s *ledgerSync) shareFrom(rows []store.LedgerEntry, key string) float64 {
	var rs []shaping.Replica
	for _, r := range rows {
		if r.Key == key {
			rs = append(rs, shaping.Replica{Name: r.Replica, Demand: r.Demand, Share: r.Share, Self: r.Replica == s.cfg.Replica,
				Short: r.Provider.ShortRequests > 0 || r.Provider.ShortTokens > 0})
		}
	}
	share := shaping.ReplicaShare(rs, shaping.ShareFloorDefault)
	s.mu.Lock()
	s.shares[key] = share
	s.mu.Unlock()
	return share
}

// peersFrom sums what the other replicas' rows of ledger key say they hold
// of the provider (their credit), with the smallest short bucket any of
// them learned.
func (s *ledgerSync) peersFrom(rows []store.LedgerEntry, key string) shaping.ReplicaState {
	var st shaping.ReplicaState
	least := func(have, v float64) float64 {
		if v > 0 && (have == 0 || v < have) {
			return v
		}
		return have
	}
	for _, r := range rows {
		if r.Key != key || r.Replica == s.cfg.Replica {
			continue
		}
		p := r.Provider
		st.Requests += p.CreditRequests
		st.Tokens += p.CreditTokens
		st.ShortRequests = least(st.ShortRequests, p.ShortRequests)
		st.ShortTokens = least(st.ShortTokens, p.ShortTokens)
	}
	return st
}

// startShare is the share a new lane (or scope) starts on, of the quota of
// ledger key: the last one the ledger gave, or, for a key the ledger has
// not seen yet, one read now (declaring a backlog: a lane is made for jobs
// to run). A ledger that cannot be read starts it on the floor; the next
// round corrects it.
func (s *ledgerSync) startShare(ctx context.Context, key string) float64 {
	s.mu.Lock()
	share, ok := s.shares[key]
	s.mu.Unlock()
	if ok {
		return share
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Lease)
	defer cancel()
	rows, err := s.cfg.Ledger.RenewQuotas(ctx, s.cfg.Replica, s.cfg.Lease,
		[]store.QuotaClaim{{Key: key, Demand: backlogDemand, Share: shaping.ShareFloorDefault}})
	if err != nil {
		s.cfg.Log.Warn("read the quota ledger; the lane starts on the floor", slog.String("quota", key), slog.Any("error", err))
		return shaping.ShareFloorDefault
	}
	return s.shareFrom(rows, key)
}

// demand is what the scope could use of its quota now, in requests: its
// jobs this worker holds (without a permit, calling), plus backlogDemand
// while the scheduler holds its queued jobs.
func (sc *scopeQuota) demand() float64 {
	d := float64(sc.pending.Load() + max(0, sc.inFlight.Load()))
	if sc.held.Load() {
		d += backlogDemand
	}
	return d
}

// demand is what the lane could use of its quota now, in requests: the
// jobs it holds (waiting for admission or a slot, calling), plus
// backlogDemand while its model has queued jobs this worker left.
func (l *lane) demand() float64 {
	s := l.shaper.Snapshot()
	d := float64(l.pending.Load()) + float64(s.InFlight+s.Waiting)
	if l.backlog.Load() {
		d += backlogDemand
	}
	return d
}
