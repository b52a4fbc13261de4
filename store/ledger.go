package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Ledger is the tables the replicas share their limits through: the quota
// ledger (below) and the API's door counts (doorcounts.go).
type Ledger struct{ *base }

// The quota ledger (table quota_ledger): how the replicas of llmq that
// call one provider on one API key share its quota. Each replica holds one
// row per quota key, renewed with its demand and the share it runs on
// under a short lease; the live rows are what every replica divides the
// quota by. Admission never reads it: a replica renews its rows about
// twice a second and sets its lanes' shares from the answer.
// docs/design/replicas.md.

// LedgerGone is how long after its lease ended a row is deleted (by the
// next renewal of any replica on its key).
const LedgerGone = time.Minute

// QuotaClaim is one replica's row of one quota key, as it renews it.
type QuotaClaim struct {
	// Key names the quota: the provider, the API key (hashed) and the
	// model. Required.
	Key string
	// Demand is what the replica could use of the quota now (requests it
	// holds, plus its backlog), in any unit every replica of the key
	// shares. Not negative.
	Demand float64
	// Share is the part of the quota the replica runs on, in (0, 1].
	Share float64
	// Provider is what the replica holds and knows of the provider, for
	// the others. Zero for a quota without one (a tenant's).
	Provider ProviderState
}

// ProviderState is what a replica holds and knows of a provider's quota
// (shaping.ReplicaState): the credit its buckets hold, and the short
// bucket it learned (0: none). Not negative.
type ProviderState struct {
	CreditRequests, CreditTokens float64
	ShortRequests, ShortTokens   float64
}

// LedgerEntry is one live row of the ledger.
type LedgerEntry struct {
	Key, Replica  string
	Demand, Share float64
	Provider      ProviderState
	LeaseUntil    time.Time
}

// RenewQuotas writes replica's rows of the claims' keys (demand, share,
// provider state, lease until now + lease) and returns every live row of those keys (lease
// not ended at now), replica's own included, ordered by key then replica.
// Rows of other replicas whose lease ended LedgerGone ago are deleted on
// the way (without waiting for rows another renewal holds).
func (s *Ledger) RenewQuotas(ctx context.Context, replica string, lease time.Duration, claims []QuotaClaim) ([]LedgerEntry, error) {
	if replica == "" || lease <= 0 {
		return nil, fmt.Errorf("store: renew quotas: a replica and a positive lease are required")
	}
	if len(claims) == 0 {
		return nil, nil
	}
	keys := make([]string, len(claims))
	demands := make([]float64, len(claims))
	shares := make([]float64, len(claims))
	var provider [4][]float64
	for i := range provider {
		provider[i] = make([]float64, len(claims))
	}
	for i, c := range claims {
		p := c.Provider
		if c.Key == "" || !(c.Demand >= 0) || !(c.Share > 0 && c.Share <= 1) ||
			!(p.CreditRequests >= 0 && p.CreditTokens >= 0 && p.ShortRequests >= 0 && p.ShortTokens >= 0) {
			return nil, fmt.Errorf("store: renew quotas: claim %d: a key, a demand >= 0, a share in (0, 1] and a provider state >= 0 are required, got %+v", i, c)
		}
		keys[i], demands[i], shares[i] = c.Key, c.Demand, c.Share
		provider[0][i], provider[1][i], provider[2][i], provider[3][i] = p.CreditRequests, p.CreditTokens, p.ShortRequests, p.ShortTokens
	}
	now := s.clock()
	var out []LedgerEntry
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Renewals of one key take turns: each statement reads the rows
		// committed before it began, so two replicas that wrote their
		// first rows of a key at once would each see itself alone and run
		// on the whole quota until their next round (a tenant's quota,
		// whose rows are written when its first job arrives, spent twice
		// over). In the order of the keys, so that renewals of several
		// keys never wait for each other in a circle.
		if _, err := tx.Exec(ctx, `SELECT count(pg_advisory_xact_lock(hashtextextended('llmq.quota_ledger ' || k, 0)))
			FROM unnest($1::text[]) AS k`, sortedUnique(keys)); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `WITH gone AS (
			DELETE FROM quota_ledger WHERE ctid IN (SELECT ctid FROM quota_ledger
				WHERE quota_key = ANY($2) AND replica <> $1 AND lease_until < $6 FOR UPDATE SKIP LOCKED)
		), up AS (
			INSERT INTO quota_ledger (quota_key, replica, demand, share, lease_until,
				credit_requests, credit_tokens, short_requests, short_tokens)
			SELECT k, $1, d, sh, $5, cr, ct, sr, st
			FROM unnest($2::text[], $3::float8[], $4::float8[], $8::float8[], $9::float8[], $10::float8[], $11::float8[])
				AS c(k, d, sh, cr, ct, sr, st)
			ON CONFLICT (quota_key, replica) DO UPDATE SET demand = excluded.demand, share = excluded.share,
				lease_until = excluded.lease_until, credit_requests = excluded.credit_requests,
				credit_tokens = excluded.credit_tokens, short_requests = excluded.short_requests,
				short_tokens = excluded.short_tokens
			RETURNING quota_key, replica, demand, share, credit_requests, credit_tokens, short_requests, short_tokens, lease_until
		)
		SELECT * FROM up
		UNION ALL
		SELECT quota_key, replica, demand, share, credit_requests, credit_tokens, short_requests, short_tokens, lease_until
			FROM quota_ledger WHERE quota_key = ANY($2) AND replica <> $1 AND lease_until > $7
		ORDER BY 1, 2`,
			replica, keys, demands, shares, now.Add(lease), now.Add(-LedgerGone), now,
			provider[0], provider[1], provider[2], provider[3])
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (LedgerEntry, error) {
			var e LedgerEntry
			p := &e.Provider
			err := r.Scan(&e.Key, &e.Replica, &e.Demand, &e.Share,
				&p.CreditRequests, &p.CreditTokens, &p.ShortRequests, &p.ShortTokens, &e.LeaseUntil)
			e.LeaseUntil = e.LeaseUntil.UTC()
			return e, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: renew quotas: %w", err)
	}
	return out, nil
}

// sortedUnique is keys sorted, without repeats.
func sortedUnique(keys []string) []string {
	return slices.Compact(slices.Sorted(slices.Values(keys)))
}

// LeaveQuotas deletes replica's rows: a replica that stops gives its
// shares to the others at once rather than when its lease ends.
func (s *Ledger) LeaveQuotas(ctx context.Context, replica string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM quota_ledger WHERE replica = $1`, replica); err != nil {
		return fmt.Errorf("store: leave quotas: %w", err)
	}
	return nil
}
