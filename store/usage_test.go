package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/store"
)

// TestUsage sums the calls and tokens of the jobs that finished, per
// tenant and project, over the last minute and the UTC day.
func TestUsage(t *testing.T) {
	t.Parallel()
	b := setup(t) // 12:00 UTC
	finish := func(id, tenant, project string, calls, prompt, completion int) {
		j := newJob(t, id)
		j.Tenant, j.Project = tenant, project
		l := b.hold(t, "w", j)[id]
		for range calls {
			_, err := b.store.MarkCalling(b.ctx, l, store.PolicyState{})
			require.NoError(t, err)
		}
		_, err := b.store.StoreResult(b.ctx, l.Key, store.Result{UsedModel: "big", PromptTokens: prompt, CompletionTokens: completion})
		require.NoError(t, err)
	}
	finish("yesterday", "acme", "", 4, 5000, 5000)
	b.clock.Advance(12 * time.Hour)          // 00:00 UTC
	finish("old", "acme", "", 1, 1000, 1000) // today, not in the last minute
	b.clock.Advance(2 * time.Minute)
	finish("a1", "acme", "", 2, 10, 5)
	finish("a2", "acme", "support", 1, 20, 7)
	finish("o1", "other", "", 1, 3, 1)
	_, err := b.store.Insert(b.ctx, newJob(t, "queued")) // not finished: not counted
	require.NoError(t, err)

	all, err := b.store.Usage(b.ctx, "")
	require.NoError(t, err)
	require.Equal(t, []store.ScopeUsage{
		{Tenant: "acme", MinuteRequests: 2, DayRequests: 3, MinuteTokens: 15, DayTokens: 2015},
		{Tenant: "acme", Project: "support", MinuteRequests: 1, DayRequests: 1, MinuteTokens: 27, DayTokens: 27},
		{Tenant: "other", MinuteRequests: 1, DayRequests: 1, MinuteTokens: 4, DayTokens: 4},
	}, all)

	mine, err := b.store.Usage(b.ctx, "other")
	require.NoError(t, err)
	require.Equal(t, all[2:], mine, "one tenant's")
}
