package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"

	"github.com/llmq/llmq/store"
)

// TestClaimOrderBySize: a job's size delay moves it back among the jobs of
// its priority: a long document recorded with two short questions is
// claimed after them, after a question recorded 2 s later (within its 3 s
// delay), and before one recorded 4 s later; a near deadline still sorts
// first whatever the size.
func TestClaimOrderBySize(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ingest := func(id string, size time.Duration) {
		t.Helper()
		_, err := b.store.Queue().Ingest(b.ctx, []store.NewJob{{Job: newJob(t, id), EstPromptTokens: 100, SizeDelay: size}})
		require.NoError(t, err)
	}
	ingest("long", 3*time.Second)
	ingest("short-1", 100*time.Millisecond)
	ingest("short-2", 0)
	b.clock.Advance(2 * time.Second)
	ingest("short-3", 100*time.Millisecond)
	b.clock.Advance(2 * time.Second)
	ingest("short-4", 100*time.Millisecond)
	due := newJob(t, "due-long")
	d := b.clock.Now().Add(30 * time.Second)
	due.Deadline = &d
	_, err := b.store.Queue().Ingest(b.ctx, []store.NewJob{{Job: due, SizeDelay: time.Hour}})
	require.NoError(t, err)

	require.Equal(t, b.clock.Now().Add(-4*time.Second+3*time.Second), b.get(t, "long").SchedKey.UTC())
	var order []string
	for range 6 {
		recs, err := b.store.Queue().Claim(b.ctx, store.ClaimRequest{Model: "big", Owner: "w", Lease: time.Minute, Limit: 1})
		require.NoError(t, err)
		require.Len(t, recs, 1)
		order = append(order, recs[0].ID)
	}
	require.Equal(t, []string{"due-long", "short-2", "short-1", "short-3", "long", "short-4"}, order)
}

// TestClaimTokenRoom: a claim bounded in tokens takes jobs in claim order
// while they fit, and leaves queued, in their places, the first job that
// does not and every job after it, however small.
func TestClaimTokenRoom(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ingest := func(id string, tokens int, size time.Duration) {
		t.Helper()
		_, err := b.store.Queue().Ingest(b.ctx, []store.NewJob{{Job: newJob(t, id), EstPromptTokens: tokens, SizeDelay: size}})
		require.NoError(t, err)
	}
	ingest("question-1", 100, 0)
	ingest("document", 2000, time.Second)
	b.clock.Advance(2 * time.Second)
	ingest("question-2", 100, 0)
	claim := func(room float64, wantLeft bool) []string {
		t.Helper()
		recs, left, err := b.store.Queue().ClaimWithin(b.ctx, store.ClaimRequest{Model: "big", Owner: "w", Lease: time.Minute, Limit: 10, TokenRoom: room})
		require.NoError(t, err)
		require.Equal(t, wantLeft, left, "a job left for the room")
		ids := []string{}
		for _, r := range recs {
			require.Equal(t, llmq.StatusRunning, r.Status, r.ID)
			ids = append(ids, r.ID)
		}
		return ids
	}
	require.Equal(t, []string{"question-1"}, claim(1999, true), "the document does not fit: nor does the question after it")
	require.Equal(t, []string{}, claim(1999, true))
	require.Equal(t, llmq.StatusQueued, b.get(t, "document").Status)
	require.Equal(t, []string{"document"}, claim(2099, true), "the question after it is left: 2,100 in all")
	require.Equal(t, []string{"question-2"}, claim(0, false), "0: no bound")
	require.Equal(t, []string{}, claim(1000, false), "nothing queued: nothing left")
}
