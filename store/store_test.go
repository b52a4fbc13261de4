package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type testBundle struct {
	ctx   context.Context
	store *store.Store
	clock *clockwork.FakeClock
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	ctx := context.Background()
	s, err := store.Open(ctx, storetest.NewDB(t), store.WithClock(clock))
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return &testBundle{ctx: ctx, store: s, clock: clock}
}

func newJob(t *testing.T, id string) *llmq.Job {
	t.Helper()
	j, err := llmq.Decode([]byte(fmt.Sprintf(`{"id":%q,"tenant":"acme","priority":"high",
		"deadline":"2027-01-02T03:04:05Z","fallback_models":["small"],"metadata":{"k":"v"},
		"body":{"model":"big","messages":[{"role":"user","content":"hi"}],"max_tokens":64}}`, id)), llmq.DecodeOptions{})
	require.NoError(t, err)
	return j
}

func TestInsertAndGet(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := newJob(t, "job-1")
	created, err := b.store.Insert(b.ctx, j)
	require.NoError(t, err)
	require.True(t, created)
	created, err = b.store.Insert(b.ctx, j)
	require.NoError(t, err)
	require.False(t, created)

	rec, err := b.store.Get(b.ctx, "acme", "job-1")
	require.NoError(t, err)
	require.Equal(t, llmq.StatusQueued, rec.Status)
	require.Equal(t, llmq.PriorityHigh, rec.Priority)
	require.Equal(t, "big", rec.RequestedModel)
	require.Equal(t, []string{"small"}, rec.FallbackModels)
	require.Equal(t, map[string]string{"k": "v"}, rec.Metadata)
	require.Equal(t, b.clock.Now(), rec.CreatedAt.UTC())
	require.Nil(t, rec.Result)
	require.Nil(t, rec.StartedAt)
	require.Equal(t, store.LaneLive, rec.Lane)
	require.True(t, rec.Deadline.Equal(*j.Deadline))

	back := rec.Job()
	require.Equal(t, "big", back.Model())
	require.Equal(t, 64, back.MaxOutputTokens())
	require.Equal(t, j.Tenant, back.Tenant)
	require.JSONEq(t, string(j.Body), string(back.Body))

	_, err = b.store.Get(b.ctx, "other", "job-1")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = b.store.GetByID(b.ctx, "nope")
	require.ErrorIs(t, err, store.ErrNotFound)

	bad := &llmq.Job{ID: "x", Tenant: "acme", Priority: llmq.PriorityNormal, Body: json.RawMessage(`{"model":"m"}`)}
	_, err = b.store.Insert(b.ctx, bad)
	require.ErrorIs(t, err, store.ErrInvalidJob)
}

func TestClaimLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := newJob(t, "job-1")

	// No row yet: the claim inserts it.
	rec, err := b.store.Claim(b.ctx, j, "w1", time.Minute)
	require.NoError(t, err)
	require.Equal(t, llmq.StatusRunning, rec.Status)
	require.Equal(t, 1, rec.Attempts)
	require.Equal(t, "w1", rec.LeaseOwner)
	require.Equal(t, b.clock.Now().Add(time.Minute), rec.LeaseExpiresAt.UTC())
	started := *rec.StartedAt

	_, err = b.store.Claim(b.ctx, j, "w2", time.Minute)
	require.ErrorIs(t, err, store.ErrLeased)

	// The holder may claim again (a redelivery to the same worker).
	b.clock.Advance(10 * time.Second)
	rec, err = b.store.Claim(b.ctx, j, "w1", time.Minute)
	require.NoError(t, err)
	require.Equal(t, 2, rec.Attempts)
	require.True(t, started.Equal(*rec.StartedAt), "started_at is set by the first claim only")

	require.NoError(t, b.store.ExtendLease(b.ctx, "job-1", "w1", 2*time.Minute))
	b.clock.Advance(time.Minute + 30*time.Second)
	_, err = b.store.Claim(b.ctx, j, "w2", time.Minute)
	require.ErrorIs(t, err, store.ErrLeased, "the extended lease is still live")

	// Once the lease expired, another worker takes over.
	b.clock.Advance(time.Minute)
	rec, err = b.store.Claim(b.ctx, j, "w2", time.Minute)
	require.NoError(t, err)
	require.Equal(t, "w2", rec.LeaseOwner)
	require.Equal(t, 3, rec.Attempts)

	require.ErrorIs(t, b.store.ExtendLease(b.ctx, "job-1", "w1", time.Minute), store.ErrLeased)
	require.ErrorIs(t, b.store.MarkRetrying(b.ctx, "job-1", "w1", "rate_limited", "429"), store.ErrLeased)
	require.ErrorIs(t, b.store.Release(b.ctx, "job-1", "w1"), store.ErrLeased)

	// Retrying keeps the lease: only its holder (or anyone after expiry) claims.
	require.NoError(t, b.store.MarkRetrying(b.ctx, "job-1", "w2", "rate_limited", "429 Too Many Requests"))
	rec, err = b.store.GetByID(b.ctx, "job-1")
	require.NoError(t, err)
	require.Equal(t, llmq.StatusRetrying, rec.Status)
	require.Equal(t, "rate_limited", rec.ErrorCode)
	_, err = b.store.Claim(b.ctx, j, "w3", time.Minute)
	require.ErrorIs(t, err, store.ErrLeased)
	rec, err = b.store.Claim(b.ctx, j, "w2", time.Minute)
	require.NoError(t, err)
	require.Equal(t, 4, rec.Attempts)

	// Graceful shutdown hands it back; anyone may claim it then.
	require.NoError(t, b.store.Release(b.ctx, "job-1", "w2"))
	rec, err = b.store.GetByID(b.ctx, "job-1")
	require.NoError(t, err)
	require.Equal(t, llmq.StatusQueued, rec.Status)
	require.Equal(t, "", rec.LeaseOwner)
	require.Nil(t, rec.LeaseExpiresAt)
	_, err = b.store.Claim(b.ctx, j, "w3", time.Minute)
	require.NoError(t, err)

	stored, err := b.store.StoreResult(b.ctx, "job-1", store.Result{
		Response: json.RawMessage(`{"id":"chatcmpl-1","choices":[]}`), UsedModel: "small",
		PromptTokens: 10, CompletionTokens: 5, CostUSD: 0.25,
	})
	require.NoError(t, err)
	require.True(t, stored)

	rec, err = b.store.Claim(b.ctx, j, "w4", time.Minute)
	require.ErrorIs(t, err, store.ErrTerminal)
	require.ErrorIs(t, err, store.ErrIllegalTransition)
	require.NotNil(t, rec, "a terminal claim returns the record")
	require.Equal(t, llmq.StatusSucceeded, rec.Status)
	require.JSONEq(t, `{"id":"chatcmpl-1","choices":[]}`, string(rec.Result))
	require.Equal(t, "small", rec.UsedModel)
	require.Equal(t, 10, rec.PromptTokens)
	require.Equal(t, 5, rec.CompletionTokens)
	require.Equal(t, 0.25, rec.CostUSD)
	require.Equal(t, b.clock.Now(), rec.FinishedAt.UTC())
	require.Equal(t, "", rec.ErrorCode, "success clears the last retry error")

	_, err = b.store.Claim(b.ctx, j, "", time.Minute)
	require.Error(t, err)
}

func TestClaimBatched(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, id := range []string{"a", "b"} {
		_, err := b.store.Insert(b.ctx, newJob(t, id))
		require.NoError(t, err)
	}
	_, err := b.store.Claim(b.ctx, newJob(t, "b"), "w1", time.Minute)
	require.NoError(t, err)
	moved, err := b.store.MarkBatched(b.ctx, "batch_1", "off_peak", []string{"a", "b", "missing"})
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, moved)
	rec, err := b.store.Claim(b.ctx, newJob(t, "a"), "w1", time.Minute)
	require.ErrorIs(t, err, store.ErrBatched)
	require.Equal(t, "batch_1", rec.BatchID)
	require.Equal(t, store.LaneBatch, rec.Lane)
	require.Equal(t, "off_peak", rec.LaneReason)

	require.NoError(t, b.store.Unbatch(b.ctx, "a", "batch_expired"))
	rec, err = b.store.Claim(b.ctx, newJob(t, "a"), "w1", time.Minute)
	require.NoError(t, err)
	require.Equal(t, store.LaneLive, rec.Lane)
	require.Equal(t, "", rec.BatchID)
	require.Equal(t, "batch_expired", rec.LaneReason)
}

func TestConcurrentClaims(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for round := range 10 {
		j := newJob(t, fmt.Sprintf("job-%d", round))
		if round%2 == 1 { // half the rounds start from an existing row
			_, err := b.store.Insert(b.ctx, j)
			require.NoError(t, err)
		}
		errs := make([]error, 8)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range errs {
			wg.Go(func() {
				<-start
				_, errs[i] = b.store.Claim(b.ctx, j, fmt.Sprintf("w%d", i), time.Minute)
			})
		}
		close(start)
		wg.Wait()
		wins := 0
		for _, err := range errs {
			if err == nil {
				wins++
			} else {
				require.ErrorIs(t, err, store.ErrLeased)
			}
		}
		require.Equal(t, 1, wins, "round %d", round)
		rec, err := b.store.GetByID(b.ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, 1, rec.Attempts)
	}
}

func TestConcurrentStoreResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for round := range 10 {
		j := newJob(t, fmt.Sprintf("job-%d", round))
		_, err := b.store.Claim(b.ctx, j, "w1", time.Minute)
		require.NoError(t, err)
		stored := make([]bool, 8)
		errs := make([]error, 8)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range stored {
			wg.Go(func() {
				<-start
				stored[i], errs[i] = b.store.StoreResult(b.ctx, j.ID, store.Result{
					Response: json.RawMessage(fmt.Sprintf(`{"writer":%d}`, i)), PromptTokens: i,
				})
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i := range stored {
			require.NoError(t, errs[i])
			if stored[i] {
				require.Equal(t, -1, winner, "round %d: two stores", round)
				winner = i
			}
		}
		require.NotEqual(t, -1, winner, "round %d: no store", round)
		rec, err := b.store.GetByID(b.ctx, j.ID)
		require.NoError(t, err)
		require.JSONEq(t, fmt.Sprintf(`{"writer":%d}`, winner), string(rec.Result))
		require.Equal(t, winner, rec.PromptTokens)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.store.Insert(b.ctx, newJob(t, "j"))
	require.NoError(t, err)
	_, err = b.store.Cancel(b.ctx, "other", "j")
	require.ErrorIs(t, err, store.ErrNotFound)
	rec, err := b.store.Cancel(b.ctx, "acme", "j")
	require.NoError(t, err)
	require.Equal(t, llmq.StatusCancelled, rec.Status)
	require.Equal(t, store.ErrorCodeCancelled, rec.ErrorCode)
	_, err = b.store.Cancel(b.ctx, "acme", "j")
	require.ErrorIs(t, err, store.ErrTerminal)
	_, err = b.store.Cancel(b.ctx, "acme", "missing")
	require.ErrorIs(t, err, store.ErrNotFound)
}

func TestListPaging(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var want []string // newest first
	for i := range 25 {
		j := newJob(t, fmt.Sprintf("job-%02d", i))
		_, err := b.store.Insert(b.ctx, j)
		require.NoError(t, err)
		if i%3 == 0 {
			_, err = b.store.Claim(b.ctx, j, "w", time.Minute)
			require.NoError(t, err)
		}
		want = append([]string{j.ID}, want...)
		if i%2 == 0 { // pairs share a created_at: the id breaks the tie
			b.clock.Advance(time.Millisecond)
		}
	}
	other := newJob(t, "other")
	other.Tenant = "other"
	_, err := b.store.Insert(b.ctx, other)
	require.NoError(t, err)

	var got []string
	cursor, pages := "", 0
	for {
		recs, next, err := b.store.List(b.ctx, store.ListOptions{Tenant: "acme", Limit: 10, After: cursor})
		require.NoError(t, err)
		pages++
		for _, r := range recs {
			got = append(got, r.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	require.Equal(t, 3, pages)
	require.Equal(t, want, got)

	recs, next, err := b.store.List(b.ctx, store.ListOptions{Tenant: "acme", Status: llmq.StatusRunning})
	require.NoError(t, err)
	require.Equal(t, "", next)
	require.Len(t, recs, 9)
	for _, r := range recs {
		require.Equal(t, llmq.StatusRunning, r.Status)
	}

	_, _, err = b.store.List(b.ctx, store.ListOptions{Tenant: "acme", After: "!!"})
	require.ErrorIs(t, err, store.ErrBadCursor)

	counts, err := b.store.CountByStatus(b.ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, map[llmq.Status]int64{llmq.StatusQueued: 16, llmq.StatusRunning: 9}, counts)
	counts, err = b.store.CountByStatus(b.ctx, "")
	require.NoError(t, err)
	require.Equal(t, int64(17), counts[llmq.StatusQueued])
}

// TestInsertEdgeBodies stores bodies at the edges of what Decode accepts:
// whatever Decode accepts, Postgres must store.
func TestInsertEdgeBodies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	big := "1" + strings.Repeat("0", 4999)
	tiny := "0." + strings.Repeat("0", 4990) + "1e-5000"
	deep := strings.Repeat("[", 5000) + strings.Repeat("]", 5000)
	for i, extra := range []string{
		`"temperature":1e5000`, `"temperature":1e-5000`, `"n":` + big, `"x":` + tiny, `"x":` + deep,
		`"x":"\ud83d\ude00 \\u0000 \u00e9 \"q\" <&>"`, `"x":{"":null,"a":[true,false,{}]}`,
	} {
		msg := fmt.Sprintf(`{"id":"edge-%d","body":{"model":"m","messages":[{"role":"user","content":"x"}],%s}}`, i, extra)
		j, err := llmq.Decode([]byte(msg), llmq.DecodeOptions{})
		require.NoError(t, err, extra)
		created, err := b.store.Insert(b.ctx, j)
		require.NoError(t, err, extra)
		require.True(t, created)
		rec, err := b.store.GetByID(b.ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, "m", rec.Job().Model())
	}
}

func TestExpireOverdue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mk := func(id, deadline string) *llmq.Job {
		d := ""
		if deadline != "" {
			d = `"deadline":"` + deadline + `",`
		}
		j, err := llmq.Decode([]byte(`{"id":"`+id+`",`+d+`"body":{"model":"m","messages":[{"role":"user"}]}}`), llmq.DecodeOptions{})
		require.NoError(t, err)
		_, err = b.store.Insert(b.ctx, j)
		require.NoError(t, err)
		return j
	}
	mk("due", "2026-11-30T11:59:59Z")
	mk("later", "2026-11-30T12:00:01Z")
	mk("none", "")
	_, err := b.store.Claim(b.ctx, mk("running", "2026-11-30T11:00:00Z"), "w", time.Minute)
	require.NoError(t, err)
	ids, err := b.store.ExpireOverdue(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"due"}, ids)
	rec, err := b.store.GetByID(b.ctx, "due")
	require.NoError(t, err)
	require.Equal(t, llmq.StatusExpired, rec.Status)
	require.Equal(t, store.ErrorCodeExpired, rec.ErrorCode)
	b.clock.Advance(2 * time.Second)
	ids, err = b.store.ExpireOverdue(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"later"}, ids)
}
