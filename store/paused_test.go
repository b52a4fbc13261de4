package store_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
)

// TestBatchLaneLeavesPausedOut: the batch lane's reservations, and the
// pending models it looks at, leave out the jobs of a paused tenant and of
// a paused project, as the live lane's claims do; resumed, they are taken.
func TestBatchLaneLeavesPausedOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var live atomic.Pointer[llmq.Tenants]
	set := func(ts llmq.Tenants) { live.Store(&ts) }
	set(llmq.Tenants{"a": {Scope: llmq.Scope{Paused: true}}, "b": {Projects: map[string]llmq.Scope{"bulk": {Paused: true}}}})
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	s, err := store.Open(ctx, storetest.NewDB(t), store.WithClock(clock),
		store.WithOrder(store.Order{Live: func() llmq.Tenants { return *live.Load() }}))
	require.NoError(t, err)
	t.Cleanup(s.Close)
	for _, tp := range [][2]string{{"a", ""}, {"a", "bulk"}, {"b", "bulk"}, {"b", ""}, {"b", "other"}} {
		j, err := llmq.Decode([]byte(fmt.Sprintf(`{"id":"%s-%s","tenant":%q,"project":%q,"deferrable":true,
			"body":{"model":"big","messages":[{"role":"user","content":"hi"}]}}`, tp[0], tp[1], tp[0], tp[1])), llmq.DecodeOptions{})
		require.NoError(t, err)
		_, err = s.Jobs().Insert(ctx, j)
		require.NoError(t, err)
	}
	held := store.BatchCandidates{Undecided: true, NotBefore: clock.Now()}
	pending, err := s.Batches().PendingBatchModels(ctx, held)
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.Equal(t, 2, pending[0].Jobs, "b's jobs outside its paused project")
	_, jobs, err := s.Batches().ReserveBatch(ctx, store.BatchReservation{ID: "lb_1", Model: "big", MaxJobs: 10, Candidates: held})
	require.NoError(t, err)
	keys := make([]string, len(jobs))
	for i, j := range jobs {
		keys[i] = j.Key.String()
	}
	require.ElementsMatch(t, []string{"b/b-", "b/b-other"}, keys)

	set(llmq.Tenants{})
	_, jobs, err = s.Batches().ReserveBatch(ctx, store.BatchReservation{ID: "lb_2", Model: "big", MaxJobs: 10, Candidates: held})
	require.NoError(t, err)
	require.Len(t, jobs, 3, "resumed: the held jobs are taken")
}
