package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ListAny is List for operators: Tenant may be "" to list every tenant's
// jobs (newest first, with the same cursors).
func (s *Store) ListAny(ctx context.Context, o ListOptions) ([]*JobRecord, string, error) {
	if o.Tenant != "" {
		return s.List(ctx, o)
	}
	limit := o.Limit
	if limit <= 0 {
		limit = ListLimitDefault
	}
	limit = min(limit, ListLimitMax)
	sql := `SELECT ` + jobColumns + ` FROM jobs WHERE true`
	var args []any
	if o.Status != "" {
		args = append(args, string(o.Status))
		sql += fmt.Sprintf(` AND status = $%d`, len(args))
	}
	if o.After != "" {
		at, id, err := decodeCursor(o.After)
		if err != nil {
			return nil, "", err
		}
		args = append(args, at, id)
		sql += fmt.Sprintf(` AND (created_at, id) < ($%d, $%d)`, len(args)-1, len(args))
	}
	args = append(args, limit+1)
	sql += fmt.Sprintf(` ORDER BY created_at DESC, id DESC LIMIT $%d`, len(args))
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, "", fmt.Errorf("store: list: %w", err)
	}
	recs, err := pgx.CollectRows(rows, scanJob)
	if err != nil {
		return nil, "", fmt.Errorf("store: list: %w", err)
	}
	if len(recs) <= limit {
		return recs, "", nil
	}
	recs = recs[:limit]
	last := recs[limit-1]
	return recs, encodeCursor(last.CreatedAt, last.ID), nil
}
