package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/llmq/llmq"
)

// CountLimitDefault is the count per status a caller that shows the counts
// to people asks for (GET /v1/stats/jobs, the console): past it a count
// reads "10,000 or more", as River UI's count by state does
// (riverqueue/riverui#655).
const CountLimitDefault = 10_000

// CountByStatus counts a tenant's jobs per status ("" tenant: all
// tenants), each status up to limit (<= 0: all of them). A count equal to
// limit means limit or more. Statuses without jobs are absent. It reads
// jobs_tenant_status_created_idx index only, at most limit entries per
// status, so its cost does not grow with the table (figures:
// docs/design/queue-of-record.md#countbystatus).
func (s *Jobs) CountByStatus(ctx context.Context, tenant string, limit int64) (map[llmq.Status]int64, error) {
	var bound any // NULL: LIMIT ALL
	if limit > 0 {
		bound = limit
	}
	statuses := make([]string, len(llmq.Statuses))
	for i, st := range llmq.Statuses {
		statuses[i] = string(st)
	}
	rows, err := s.pool.Query(ctx, countByStatusSQL, tenant, bound, statuses)
	if err != nil {
		return nil, fmt.Errorf("store: count: %w", err)
	}
	out := map[llmq.Status]int64{}
	var st string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&st, &n}, func() error {
		if n > 0 {
			out[llmq.Status(st)] = n
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: count: %w", err)
	}
	return out, nil
}

// countByStatusSQL counts, for each status of $3, the jobs of tenant $1
// ("" = each tenant in turn, found by a loose scan of jobs_pkey) up to $2
// (NULL = all): the outer LIMIT stops the nested loop once $2 jobs are
// found, across tenants.
const countByStatusSQL = `WITH RECURSIVE t AS (
		(SELECT tenant FROM jobs WHERE $1 = '' ORDER BY tenant LIMIT 1)
		UNION ALL
		SELECT (SELECT j.tenant FROM jobs j WHERE j.tenant > t.tenant ORDER BY j.tenant LIMIT 1) FROM t
		WHERE t.tenant IS NOT NULL),
	scope AS (SELECT tenant FROM t WHERE tenant IS NOT NULL UNION ALL SELECT $1 WHERE $1 <> '')
	SELECT s.status, (SELECT count(*) FROM (SELECT FROM scope CROSS JOIN LATERAL (
			SELECT FROM jobs j WHERE j.tenant = scope.tenant AND j.status = s.status LIMIT $2::bigint) k
		LIMIT $2::bigint) q)
	FROM unnest($3::text[]) s(status)`
