package llmq_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
)

func TestTenantsPriorityCaps(t *testing.T) {
	t.Parallel()
	ts := llmq.Tenants{
		"acme": {Scope: llmq.Scope{Priority: llmq.PriorityNormal},
			Projects: map[string]llmq.Scope{"bulk": {Priority: llmq.PriorityLow}, "free": {}}},
		"open": {},
	}
	for _, tc := range []struct {
		tenant, project string
		asked, want     llmq.Priority
	}{
		{"acme", "", llmq.PriorityHigh, llmq.PriorityNormal},
		{"acme", "", llmq.PriorityLow, llmq.PriorityLow},
		{"acme", "bulk", llmq.PriorityHigh, llmq.PriorityLow},
		{"acme", "free", llmq.PriorityHigh, llmq.PriorityNormal},
		{"acme", "unlisted", llmq.PriorityHigh, llmq.PriorityNormal},
		{"open", "", llmq.PriorityHigh, llmq.PriorityHigh},
		{"unlisted", "", llmq.PriorityHigh, llmq.PriorityHigh},
	} {
		j := &llmq.Job{Tenant: tc.tenant, Project: tc.project, Priority: tc.asked}
		require.Equal(t, tc.want, ts.Priority(j), "%s/%s asking %s", tc.tenant, tc.project, tc.asked)
	}
}
