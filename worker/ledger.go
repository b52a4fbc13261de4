package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"maps"
	"slices"

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
func (w *Worker) quotaKey(model string) string { return w.cfg.QuotaScope + " " + model }

// scopeKey is the ledger's key of a tenant's or project's quota (named by
// scopeName): one for every provider and model, as the scope's limits are.
func scopeKey(name string) string { return "scope " + name }

// ledgerLoop renews the worker's rows and sets its lanes' shares every
// LedgerPeriod until ctx ends, then deletes the rows, so the other
// replicas take this one's shares at once.
func (w *Worker) ledgerLoop(ctx context.Context) {
	defer w.background.Done()
	tick := w.cfg.Clock.NewTicker(w.cfg.LedgerPeriod)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.LedgerLease)
			defer cancel()
			if err := w.cfg.Ledger.LeaveQuotas(lctx, w.cfg.Replica); err != nil {
				w.log.Warn("leave the quota ledger", slog.Any("error", err))
			}
			return
		case <-tick.Chan():
		}
		w.ledgerRound(ctx)
	}
}

// ledgerRound renews the rows of every lane the worker has or its catalog
// lists (one per pool entry: each key's quota is shared apart; so a
// replica counts before its first job) and sets the shares from the live
// rows. On an error the lanes keep their shares.
func (w *Worker) ledgerRound(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.LedgerLease)
	defer cancel()
	w.lanesMu.Lock()
	lanes := maps.Clone(w.lanes)
	w.lanesMu.Unlock()
	type ledgerLane struct {
		key string
		l   *lane // nil: not started
	}
	var quotas []ledgerLane
	for _, name := range slices.Sorted(maps.Keys(lanes)) {
		quotas = append(quotas, ledgerLane{key: lanes[name].quotaKey, l: lanes[name]})
	}
	for m := range w.cfg.Catalog.Models {
		for i, key := range w.quotaKeys(m) {
			entry := ""
			if pool := w.pool(m); len(pool) > 0 {
				entry = pool[i].Name
			}
			if _, ok := lanes[laneName(m, entry)]; !ok {
				quotas = append(quotas, ledgerLane{key: key})
			}
		}
	}
	claims := make([]store.QuotaClaim, len(quotas))
	w.sharesMu.Lock()
	for i, q := range quotas {
		share, ok := w.shares[q.key]
		if !ok {
			share = shaping.ShareFloorDefault // not started yet
		}
		claims[i] = store.QuotaClaim{Key: q.key}
		if q.l != nil {
			claims[i].Demand = q.l.demand()
			share = q.l.shaper.Share()
			st := q.l.shaper.StateAt(w.cfg.Clock.Now())
			claims[i].Provider = store.ProviderState{CreditRequests: st.Requests, CreditTokens: st.Tokens,
				ShortRequests: st.ShortRequests, ShortTokens: st.ShortTokens}
		}
		// The ledger's shares are positive: none of a short bucket is
		// written as the least share.
		claims[i].Share = shaping.LedgerShare(share)
	}
	w.sharesMu.Unlock()
	scs := w.scopes.list()
	for _, sc := range scs {
		claims = append(claims, store.QuotaClaim{Key: scopeKey(sc.name), Demand: sc.demand(), Share: sc.shareNow()})
	}
	rows, err := w.cfg.Ledger.RenewQuotas(ctx, w.cfg.Replica, w.cfg.LedgerLease, claims)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("renew the quota ledger; the lanes keep their shares", slog.Any("error", err))
		}
		return
	}
	now := w.cfg.Clock.Now()
	for _, q := range quotas {
		share := w.shareFrom(rows, q.key)
		if q.l != nil {
			_ = q.l.shaper.SetShareAt(now, share) // in [0, 1] by construction
			q.l.shaper.SetPeersAt(now, w.peersFrom(rows, q.key))
		}
	}
	for _, sc := range scs {
		sc.setShare(now, w.shareFrom(rows, scopeKey(sc.name)))
	}
	if len(scs) > 0 {
		w.scopes.signal() // a concurrency may have grown
	}
}

// shareFrom computes the share of the quota of ledger key from the
// ledger rows and remembers it.
func (w *Worker) shareFrom(rows []store.LedgerEntry, key string) float64 {
	var rs []shaping.Replica
	for _, r := range rows {
		if r.Key == key {
			rs = append(rs, shaping.Replica{Name: r.Replica, Demand: r.Demand, Share: r.Share, Self: r.Replica == w.cfg.Replica,
				Short: r.Provider.ShortRequests > 0 || r.Provider.ShortTokens > 0})
		}
	}
	share := shaping.ReplicaShare(rs, shaping.ShareFloorDefault)
	w.sharesMu.Lock()
	w.shares[key] = share
	w.sharesMu.Unlock()
	return share
}

// peersFrom sums what the other replicas' rows of ledger key say they hold
// of the provider (their credit), with the smallest short bucket any of
// them learned.
func (w *Worker) peersFrom(rows []store.LedgerEntry, key string) shaping.ReplicaState {
	var s shaping.ReplicaState
	least := func(have, v float64) float64 {
		if v > 0 && (have == 0 || v < have) {
			return v
		}
		return have
	}
	for _, r := range rows {
		if r.Key != key || r.Replica == w.cfg.Replica {
			continue
		}
		p := r.Provider
		s.Requests += p.CreditRequests
		s.Tokens += p.CreditTokens
		s.ShortRequests = least(s.ShortRequests, p.ShortRequests)
		s.ShortTokens = least(s.ShortTokens, p.ShortTokens)
	}
	return s
}

// startShare is the share a new lane (or scope) starts on, of the quota of
// ledger key: the last one the ledger gave, or, for a key the ledger has
// not seen yet, one read now (declaring a backlog: a lane is made for jobs
// to run). A ledger that cannot be read starts it on the floor; the next
// round corrects it.
func (w *Worker) startShare(ctx context.Context, key string) float64 {
	w.sharesMu.Lock()
	share, ok := w.shares[key]
	w.sharesMu.Unlock()
	if ok {
		return share
	}
	ctx, cancel := context.WithTimeout(ctx, w.cfg.LedgerLease)
	defer cancel()
	rows, err := w.cfg.Ledger.RenewQuotas(ctx, w.cfg.Replica, w.cfg.LedgerLease,
		[]store.QuotaClaim{{Key: key, Demand: backlogDemand, Share: shaping.ShareFloorDefault}})
	if err != nil {
		w.log.Warn("read the quota ledger; the lane starts on the floor", slog.String("quota", key), slog.Any("error", err))
		return shaping.ShareFloorDefault
	}
	return w.shareFrom(rows, key)
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
