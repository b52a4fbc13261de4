package store

import (
	"fmt"

	"github.com/llmq/llmq"
)

// notPaused is a condition on jobs that leaves out those of the paused
// tenants and projects of ts, its arguments numbered from $n; "" when
// none is paused. The batch lane's reservations apply it, as the live
// lane's claims leave paused scopes out by their caps
// (docs/design/tenants.md#tenants-as-data).
func notPaused(ts llmq.Tenants, n int) (string, []any) {
	var tenants, projTenants, projects []string
	for name, t := range ts {
		if t.Paused {
			tenants = append(tenants, name)
			continue
		}
		for p, s := range t.Projects {
			if s.Paused {
				projTenants, projects = append(projTenants, name), append(projects, p)
			}
		}
	}
	if len(tenants)+len(projects) == 0 {
		return "", nil
	}
	return fmt.Sprintf(` AND NOT (tenant = ANY($%d::text[]) OR (tenant, project) IN (SELECT * FROM unnest($%d::text[], $%d::text[])))`, n, n+1, n+2),
		[]any{tenants, projTenants, projects}
}
