package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// DoorCount is what one API replica let through of one limit at its door
// (table door_counts): API replicas behind one address share their
// requests-per-minute limits by it (docs/design/scale.md).
type DoorCount struct {
	// Name is the limit's: "key:<hash>" or "tenant:<name>".
	Name string
	// Replica is the API replica that counted.
	Replica string
	// Taken is the requests it let through since it started, LastMinute
	// those of its last minute.
	Taken      int64
	LastMinute float64
}

// ShareDoorCounts writes replica's counts with a lease and returns the
// other replicas' live ones (lease not ended), ordered by name and
// replica. Rows whose lease ended LedgerGone ago are deleted.
func (s *Ledger) ShareDoorCounts(ctx context.Context, replica string, lease time.Duration, counts []DoorCount) ([]DoorCount, error) {
	if replica == "" || lease <= 0 {
		return nil, fmt.Errorf("store: share door counts: a replica and a positive lease are required")
	}
	names := make([]string, len(counts))
	taken := make([]int64, len(counts))
	minute := make([]float64, len(counts))
	for i, c := range counts {
		if c.Name == "" || c.Taken < 0 || !(c.LastMinute >= 0) {
			return nil, fmt.Errorf("store: share door counts: count %d: a name, taken >= 0 and last minute >= 0 are required, got %+v", i, c)
		}
		names[i], taken[i], minute[i] = c.Name, c.Taken, c.LastMinute
	}
	now := s.clock()
	rows, err := s.pool.Query(ctx, `WITH gone AS (
			DELETE FROM door_counts WHERE ctid IN (SELECT ctid FROM door_counts
				WHERE lease_until < $5 FOR UPDATE SKIP LOCKED)
		), up AS (
			INSERT INTO door_counts (name, replica, taken, last_minute, lease_until)
			SELECT n, $1, t, m, $6 FROM unnest($2::text[], $3::bigint[], $4::float8[]) AS c(n, t, m)
			ON CONFLICT (name, replica) DO UPDATE SET taken = excluded.taken,
				last_minute = excluded.last_minute, lease_until = excluded.lease_until
		)
		SELECT name, replica, taken, last_minute FROM door_counts
		WHERE replica <> $1 AND lease_until > $7
		ORDER BY name, replica`,
		replica, names, taken, minute, now.Add(-LedgerGone), now.Add(lease), now)
	if err != nil {
		return nil, fmt.Errorf("store: share door counts: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DoorCount, error) {
		var c DoorCount
		return c, r.Scan(&c.Name, &c.Replica, &c.Taken, &c.LastMinute)
	})
	if err != nil {
		return nil, fmt.Errorf("store: share door counts: %w", err)
	}
	return out, nil
}
