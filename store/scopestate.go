package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/llmq/llmq"
)

// WaitingReasonTenantQuota: the schedulers leave the job unclaimed because
// its tenant's or its project's own rpm, tpm or concurrency is spent
// (docs/design/tenants.md).
const WaitingReasonTenantQuota = "tenant_quota"

// ScopeRef names a tenant (Project "") or one of its projects.
type ScopeRef struct {
	Tenant, Project string
}

// SetScopeStates records that worker's scheduler holds the scopes of held
// (their queued jobs wait for their quota), now, and that it no longer
// holds those of freed. A scope's state counts for ModelStateTTL after it
// was written.
func (s *Queue) SetScopeStates(ctx context.Context, worker string, held, freed []ScopeRef) error {
	if len(held) == 0 && len(freed) == 0 {
		return nil
	}
	split := func(rs []ScopeRef) (ts, ps []string) {
		for _, r := range rs {
			ts, ps = append(ts, r.Tenant), append(ps, r.Project)
		}
		return ts, ps
	}
	ht, hp := split(held)
	ft, fp := split(freed)
	_, err := s.pool.Exec(ctx, `WITH freed AS (
			DELETE FROM scope_state s USING unnest($4::text[], $5::text[]) AS f(tenant, project)
			WHERE s.tenant = f.tenant AND s.project = f.project AND s.worker = $1)
		INSERT INTO scope_state (tenant, project, worker, updated_at)
		SELECT tenant, project, $1, $6 FROM unnest($2::text[], $3::text[]) AS h(tenant, project)
		ORDER BY 1, 2
		ON CONFLICT (tenant, project) DO UPDATE SET worker = excluded.worker, updated_at = excluded.updated_at`,
		worker, ht, hp, ft, fp, s.clock())
	if err != nil {
		return fmt.Errorf("store: set scope states: %w", err)
	}
	return nil
}

// fillScopeReasons sets WaitingReasonTenantQuota on the queued live
// records whose tenant, or project, a scheduler holds.
func (s *base) fillScopeReasons(ctx context.Context, recs []*JobRecord) error {
	var tenants []string
	for _, r := range recs {
		if r.Status == llmq.StatusQueued && r.Lane != LaneBatch {
			tenants = append(tenants, r.Tenant)
		}
	}
	if len(tenants) == 0 {
		return nil
	}
	rows, err := s.pool.Query(ctx, `SELECT tenant, project FROM scope_state
		WHERE tenant = ANY($1) AND updated_at > $2`, tenants, s.clock().Add(-ModelStateTTL))
	if err != nil {
		return err
	}
	held := map[ScopeRef]bool{}
	var ref ScopeRef
	if _, err := pgx.ForEachRow(rows, []any{&ref.Tenant, &ref.Project}, func() error {
		held[ref] = true
		return nil
	}); err != nil {
		return err
	}
	for _, r := range recs {
		if r.Status != llmq.StatusQueued || r.Lane == LaneBatch || r.WaitingReason == WaitingReasonBatch {
			continue
		}
		if held[ScopeRef{Tenant: r.Tenant}] || r.Project != "" && held[ScopeRef{Tenant: r.Tenant, Project: r.Project}] {
			r.WaitingReason = WaitingReasonTenantQuota
		}
	}
	return nil
}
