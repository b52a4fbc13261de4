package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"strings"
	"time"

	"github.com/llmq/llmq/store"
)

// Defaults of the sharing of the door's limits between API replicas.
const (
	// LimitPeriodDefault is how often a replica writes its counts and
	// reads the others'.
	LimitPeriodDefault = 500 * time.Millisecond
	// LimitLeaseDefault is how long a replica's counts live unrenewed.
	LimitLeaseDefault = 3 * time.Second
)

// Prefixes of the shared limits' names (store.DoorCount.Name).
const (
	doorKeyPrefix    = "key:"
	doorTenantPrefix = "tenant:"
)

// LimitLedger carries the counts of the door's limits between the API
// replicas behind one address; a [*store.Ledger] is one.
type LimitLedger interface {
	// ShareDoorCounts writes replica's counts with a lease and returns
	// the other replicas' live ones.
	ShareDoorCounts(ctx context.Context, replica string, lease time.Duration, counts []store.DoorCount) ([]store.DoorCount, error)
}

// keyLimitName is the name of the bucket of the API key whose hash is
// hash: 12 bytes of the hash in hex, enough to tell the configured keys
// apart and less than the whole hash in the shared table.
func keyLimitName(hash [sha256.Size]byte) string { return hex.EncodeToString(hash[:12]) }

// took counts one request name let through at now.
func (s *limiterSet) took(name string, now time.Time) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entry(name, false)
	if e == nil {
		return
	}
	e.taken++
	sec := now.Unix()
	i := sec % int64(len(e.sec))
	if e.sec[i] != sec {
		e.sec[i], e.count[i] = sec, 0
	}
	e.count[i]++
}

// counts returns this replica's count of every name of s that took a
// request, its name prefixed.
func (s *limiterSet) counts(prefix, replica string, now time.Time) []store.DoorCount {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.DoorCount
	sec := now.Unix()
	for _, name := range s.lru.Keys() {
		e, _ := s.lru.Peek(name)
		if e.taken == 0 {
			continue
		}
		var minute int64
		for i, at := range e.sec {
			if at > sec-int64(len(e.sec)) && at <= sec {
				minute += e.count[i]
			}
		}
		out = append(out, store.DoorCount{Name: prefix + name, Replica: replica, Taken: e.taken, LastMinute: float64(minute)})
	}
	return out
}

// apply takes from s's buckets the requests the peers let through since
// they were last applied (peers: the live counts of the names of s, the
// prefix cut). A peer seen for the first time counts its last minute. The
// buckets may go into debt (the peers let through more than was left, in
// the period before they heard of this replica's requests), down to one
// bucket's size: the debt is paid by refusing until the refill covers it.
// A peer no longer in peers (stopped, or its lease ended) is forgotten.
// Only a name known (configured) or with a bucket here already (a key or
// tenant kept as data this replica let through) is taken from.
func (s *limiterSet) apply(peers []store.DoorCount, now time.Time, known func(string) bool) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[[2]string]int64, len(peers))
	for _, p := range peers {
		if !known(p.Name) && s.entry(p.Name, false) == nil {
			continue
		}
		k := [2]string{p.Replica, p.Name}
		seen[k] = p.Taken
		last, ok := s.seen[k]
		n := p.Taken - last
		if !ok || n < 0 {
			n = int64(p.LastMinute)
		}
		e := s.entry(p.Name, true)
		n = min(n, int64(e.lim.TokensAt(now))+int64(s.perMinute), int64(s.perMinute))
		if n > 0 {
			e.lim.ReserveN(now, int(n))
		}
	}
	s.seen = seen
}

// shareLimits writes this replica's counts and applies the others' every
// Config.LimitPeriod until ctx ends: the replicas behind one address share
// their key and tenant limits (docs/design/scale.md). A failed exchange is
// logged and the next one tried; meanwhile each replica limits alone.
func (dr *door) shareLimits(ctx context.Context) {
	tick := dr.clock.NewTicker(dr.period)
	defer tick.Stop()
	for {
		if err := dr.exchangeLimits(ctx); err != nil && ctx.Err() == nil {
			dr.log.Warn("api: share the door's limits with the other replicas", slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.Chan():
		}
	}
}

// exchangeLimits is one exchange of shareLimits.
func (dr *door) exchangeLimits(ctx context.Context) error {
	now := dr.clock.Now()
	counts := append(dr.keyLimits.counts(doorKeyPrefix, dr.replica, now),
		dr.tenantLimits.counts(doorTenantPrefix, dr.replica, now)...)
	peers, err := dr.ledger.ShareDoorCounts(ctx, dr.replica, dr.lease, counts)
	if err != nil {
		dr.limitSyncs.WithLabelValues("error").Inc()
		return err
	}
	var keys, tenants []store.DoorCount
	for _, p := range peers {
		if name, ok := strings.CutPrefix(p.Name, doorKeyPrefix); ok {
			p.Name = name
			keys = append(keys, p)
		} else if name, ok := strings.CutPrefix(p.Name, doorTenantPrefix); ok {
			p.Name = name
			tenants = append(tenants, p)
		}
	}
	now = dr.clock.Now()
	dr.keyLimits.apply(keys, now, func(name string) bool { return dr.keyNames[name] })
	dr.tenantLimits.apply(tenants, now, func(name string) bool { return dr.tenantNames[name] })
	dr.limitSyncs.WithLabelValues("ok").Inc()
	return nil
}
