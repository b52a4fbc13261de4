package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// QueueFigures is what the worker and the producer read of the queue: its
// size, each tenant's and project's part (below) and the drain's figures
// (QueueStats, outbox.go). Queue and Outbox both embed it.
type QueueFigures struct{ *base }

// TenantQueue is one tenant's part of the queue in Postgres.
type TenantQueue struct {
	Tenant string
	// Queued is 0 from QueueTenants: CountQueued counts it, up to a limit.
	Queued int64
	// InFlight counts the tenant's jobs running or retrying.
	InFlight int64
	// Finished counts the tenant's jobs that ended since the time asked
	// for (0 when none was).
	Finished int64
}

// QueueTenants lists the tenants holding queued or in-flight jobs, by
// name, with their jobs in flight and, when since is not zero, those that
// ended since then. The queued tenants are found by a loose index scan
// over jobs_fair_idx (one probe per model and tenant, however long the
// backlog); the jobs in flight are few (the workers' holds), and each
// listed tenant's finished ones are those of the window, from
// jobs_tenant_finished_idx.
func (s *QueueFigures) QueueTenants(ctx context.Context, since time.Time) ([]TenantQueue, error) {
	rows, err := s.pool.Query(ctx, `WITH RECURSIVE p(m, t) AS (
			(SELECT requested_model, tenant FROM jobs WHERE status = 'queued' ORDER BY requested_model, tenant LIMIT 1)
			UNION ALL
			SELECT n.requested_model, n.tenant FROM p, LATERAL (SELECT requested_model, tenant FROM jobs
				WHERE status = 'queued' AND (requested_model, tenant) > (p.m, p.t)
				ORDER BY requested_model, tenant LIMIT 1) n
		), r AS (
			SELECT tenant, count(*) AS n FROM jobs WHERE status `+leasedIn+` GROUP BY tenant
		), a AS (
			SELECT t AS tenant FROM p UNION SELECT tenant FROM r
		)
		SELECT a.tenant, coalesce(r.n, 0), f.n
		FROM a LEFT JOIN r USING (tenant),
			LATERAL (SELECT count(*) AS n FROM jobs WHERE tenant = a.tenant AND finished_at IS NOT NULL
				AND finished_at >= $1 AND $1 > '-infinity'::timestamptz) f
		ORDER BY a.tenant`, sinceArg(since))
	if err != nil {
		return nil, fmt.Errorf("store: queue tenants: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (TenantQueue, error) {
		var q TenantQueue
		err := row.Scan(&q.Tenant, &q.InFlight, &q.Finished)
		return q, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: queue tenants: %w", err)
	}
	return out, nil
}

// sinceArg is since as a bound of QueueTenants: -infinity (count none)
// when zero.
func sinceArg(since time.Time) pgtype.Timestamptz {
	if since.IsZero() {
		return pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	}
	return pgtype.Timestamptz{Time: since, Valid: true}
}

// CountQueued counts the queued jobs of each of tenants, each up to its
// limit (limits[i] for tenants[i]; <= 0: none counted): a caller that
// compares a tenant's backlog with its share passes the share, and a
// count reads one index entry (jobs_tenant_status_created_idx) per job
// counted.
func (s *QueueFigures) CountQueued(ctx context.Context, tenants []string, limits []int64) ([]int64, error) {
	if len(tenants) != len(limits) {
		return nil, fmt.Errorf("store: count queued: %d tenants, %d limits", len(tenants), len(limits))
	}
	if len(tenants) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT c.n FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS u(tenant, lim, i),
			LATERAL (SELECT count(*) AS n FROM (SELECT FROM jobs WHERE tenant = u.tenant AND status = 'queued'
				LIMIT greatest(u.lim, 0)) q) c
		ORDER BY u.i`, tenants, limits)
	if err != nil {
		return nil, fmt.Errorf("store: count queued: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("store: count queued: %w", err)
	}
	return out, nil
}

// CountProjects counts the jobs of some of tenant's projects queued or in
// flight: the queued ones among the first limit of the tenant's queued
// jobs (jobs_tenant_status_created_idx, the project read from each row),
// so exact while the tenant holds no more than limit; the ones in flight
// are few (the workers' holds).
func (s *QueueFigures) CountProjects(ctx context.Context, tenant string, projects []string, limit int64) ([]int64, error) {
	if len(projects) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `WITH q AS (
			SELECT project FROM jobs WHERE tenant = $1 AND status = 'queued' ORDER BY created_at, id
				LIMIT greatest($3::bigint, 0)
		), r AS (
			SELECT project FROM jobs WHERE tenant = $1 AND status `+leasedIn+`
		)
		SELECT (SELECT count(*) FROM q WHERE q.project = u.p) + (SELECT count(*) FROM r WHERE r.project = u.p)
		FROM unnest($2::text[]) WITH ORDINALITY AS u(p, i) ORDER BY u.i`, tenant, projects, limit)
	if err != nil {
		return nil, fmt.Errorf("store: count projects: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("store: count projects: %w", err)
	}
	return out, nil
}
