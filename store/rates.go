package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// JobMinute is the jobs recorded and finished in one minute.
type JobMinute struct {
	Minute time.Time
	// Recorded counts the jobs created in the minute (created_at).
	Recorded int64
	// Succeeded counts the jobs that finished in the minute (finished_at)
	// succeeded; OtherFinished those that reached another terminal status
	// (failed, dead_lettered, expired, cancelled).
	Succeeded, OtherFinished int64
}

// jobRatesSQL counts the jobs recorded and finished since $1 per minute, of
// tenant $2 or, with all, of every tenant, reading index ranges of the
// window only. The per-tenant count is grouped inside the LATERAL so that
// the planner cannot flatten it into a sequential scan
// (docs/design/queue-of-record.md#jobratessql).
func jobRatesSQL(all bool) string {
	tenants, finishedTenant := `SELECT $2::text AS tenant`, ` AND tenant = $2`
	if all {
		tenants = `(SELECT tenant FROM jobs ORDER BY tenant LIMIT 1)
		UNION ALL
		SELECT (SELECT j.tenant FROM jobs j WHERE j.tenant > t.tenant ORDER BY j.tenant LIMIT 1)
		FROM tenants t WHERE t.tenant IS NOT NULL AND $2::text = ''`
		finishedTenant = ``
	}
	return `WITH RECURSIVE tenants AS (` + tenants + `),
	recorded AS (SELECT j.minute, sum(j.n)::bigint AS n
		FROM tenants t CROSS JOIN LATERAL (SELECT date_trunc('minute', created_at) AS minute, count(*) AS n
			FROM jobs WHERE tenant = t.tenant AND created_at >= $1 GROUP BY 1) j
		WHERE t.tenant IS NOT NULL GROUP BY 1),
	finished AS (SELECT date_trunc('minute', finished_at) AS minute,
			count(*) FILTER (WHERE status = 'succeeded') AS ok, count(*) FILTER (WHERE status <> 'succeeded') AS other
		FROM jobs WHERE finished_at >= $1 AND status IN ('succeeded', 'failed', 'dead_lettered', 'expired', 'cancelled')` +
		finishedTenant + ` GROUP BY 1)
	SELECT coalesce(r.minute, f.minute), coalesce(r.n, 0), coalesce(f.ok, 0), coalesce(f.other, 0)
	FROM recorded r FULL JOIN finished f ON f.minute = r.minute ORDER BY 1`
}

// JobRates returns the jobs recorded and finished since since, per
// minute, of tenant ("" for every tenant's): the minutes with any, in
// order.
func (s *Jobs) JobRates(ctx context.Context, tenant string, since time.Time) ([]JobMinute, error) {
	rows, err := s.pool.Query(ctx, jobRatesSQL(tenant == ""), since.UTC(), tenant)
	if err != nil {
		return nil, fmt.Errorf("store: job rates: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (JobMinute, error) {
		var m JobMinute
		err := r.Scan(&m.Minute, &m.Recorded, &m.Succeeded, &m.OtherFinished)
		m.Minute = m.Minute.UTC()
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: job rates: %w", err)
	}
	return out, nil
}
